"""Near copies: a prompt asked again in the same words, but for a greeting, a "please" or a "thanks", its
closing punctuation, the case of its first letter, or spaces at its lines' ends. It is found by a hash of
its words, before the request leaves, in microseconds at any length: no embedding is computed. A model call
(MiniLM: 4 ms for a few words, over 100 ms for 600 here) is what a paraphrase in other words still needs.

What is left out is chosen to carry no meaning, so a near copy is served without the guards (guards.py:
they compare facts, and every word that states one is the same; reading a new 600-word prompt's facts
takes them 10 ms here). Case is kept (code and identifiers are case-sensitive), but for the first letter;
so are the spaces between words and at a line's start (indentation is code's syntax: collapsing them took
a regular expression 0.1 ms per 5 KB here, as much as the whole miss is allowed), and a "!" after a
digit (a factorial).
"""

from __future__ import annotations

import re
from collections import OrderedDict

from blake3 import blake3

# Greetings and courtesies, at the start or the end only: inside a prompt "please" may be what it is about.
_OPENING = re.compile(r"^(?:(?:hi|hello|hey)(?:\s+there)?\b[\s,.!:;-]*)?(?:(?:please|pls|kindly)\b[\s,.!:;-]*)?",
                      re.IGNORECASE)
_PUNCTUATION = r"(?:[\s,.?;:-]|(?<!\d)!)*"
_CLOSING = re.compile(rf"{_PUNCTUATION}(?:\b(?:please|pls|thanks|thank\s+you|thx|cheers)\b{_PUNCTUATION})*$",
                      re.IGNORECASE)
_CLOSING_CHARS = 64  # it is looked for in the text's tail only: searched from the start, it cost 0.1 ms a 10 KB
_LINE_ENDS = re.compile(r"[ \t]+(?=\r?\n)|\r(?=\n)")


def same_words(text: str) -> str:
    """The text less what `near_copies` says carries no meaning; its first letter in lower case."""
    if " \n" in text or "\t\n" in text or "\r" in text:  # a scan in C first: the expression costs 20 times more
        text = _LINE_ENDS.sub("", text)
    text = text.strip()
    opening = _OPENING.match(text)
    start = opening.end() if opening is not None else 0
    tail = max(start, len(text) - _CLOSING_CHARS)
    closing = _CLOSING.search(text, tail)
    end = closing.start() if closing is not None else len(text)
    words = text[start:end]
    return words[:1].lower() + words[1:]


def near_key(scope: str, text: str) -> str | None:
    """None for a prompt of courtesies alone ("Thanks!"): "Please" is no near copy of it."""
    words = same_words(text)
    if not words:
        return None
    return blake3(b"%s\x00%s" % (scope.encode(), words.encode("utf-8", "surrogatepass"))).hexdigest(16)


class NearCopies:
    """Kept prompts by their words' hash within their scope; bounded, the oldest forgotten first."""

    def __init__(self, max_prompts: int) -> None:
        self.max_prompts = max_prompts
        self._by_key: dict[str, str] = {}  # near key → the answer's exact key
        self._keys: OrderedDict[str, str] = OrderedDict()  # the answer's exact key → its near key, oldest first

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, scope: str, text: str, ref: str) -> None:
        self.remove(ref)
        key = near_key(scope, text)
        if key is None:
            return
        replaced = self._by_key.get(key)
        if replaced is not None:  # the same words kept again under another exact key: the newest answers
            self._keys.pop(replaced, None)
        self._by_key[key] = ref
        self._keys[ref] = key
        while len(self._keys) > self.max_prompts:
            self.remove(next(iter(self._keys)))

    def find(self, scope: str, text: str) -> str | None:
        """The exact key of the answer kept for a near copy of `text` in `scope`."""
        if not self._by_key:
            return None
        key = near_key(scope, text)
        return None if key is None else self._by_key.get(key)

    def remove(self, ref: str) -> None:
        key = self._keys.pop(ref, None)
        if key is not None and self._by_key.get(key) == ref:
            del self._by_key[key]
