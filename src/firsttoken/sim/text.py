"""The simulated model's words: a tokenizer of its own and deterministic text.

The region is not a language model, so it defines its own tokens: in prompts a word or a punctuation
mark, in answers a word of the corpus with its punctuation (one engine step writes one of them).
Usage counts are exact under that definition, and the same request always gets the same answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_TOKEN = re.compile(r"\w+|[^\w\s]")

CORPUS = (
    "The request left Lagos on a submarine cable, crossed the ocean in a few dozen milliseconds, and waited "
    "in a queue in front of a busy GPU. The model read every weight once for each token it wrote, so the "
    "answer came back one word at a time, as fast as memory bandwidth allowed. A gateway near the user kept "
    "the connection warm, streamed each token the moment it arrived, and measured where the time went: "
    "distance, handshakes, queue, prefill and generation."
).split(" ")


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def prompt_tokens(messages: Any) -> int:
    """Tokens in a chat's messages: their text, plus four per message for the role and separators."""
    total = 0
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        total += 4 + count_tokens(str(content or ""))
    return max(total, 1)


@dataclass(frozen=True)
class Answer:
    pieces: list[str]  # one per token
    finish: str  # "length" | "stop"
    stop_sequence: str | None = None  # the one that ended it


def answer(max_tokens: int, stop: list[str]) -> Answer:
    """The answer of at most `max_tokens` tokens, cut before the first stop sequence it would contain.

    Linear in the answer's length: each new piece is searched together with only as much of the text
    before it as a stop sequence could straddle."""
    pieces: list[str] = []
    reach = max((len(s) for s in stop), default=0)
    tail = ""  # the last `reach` characters of the text so far
    for i in range(max_tokens):
        piece = CORPUS[i % len(CORPUS)] if i == 0 else " " + CORPUS[i % len(CORPUS)]
        if stop:
            window = tail + piece
            hits = [(at, s) for s in stop if (at := window.find(s)) >= 0]
            if hits:
                at, sequence = min(hits)
                cut = len(tail) - at  # characters of the earlier text that belong to the stop sequence
                if cut > 0:  # it began in earlier pieces: take those characters back
                    while cut > 0 and pieces:
                        last = pieces.pop()
                        if len(last) > cut:
                            pieces.append(last[:-cut])
                        cut -= len(last)
                else:
                    rest = piece[:at - len(tail)]
                    if rest:
                        pieces.append(rest)
                return Answer(pieces, "stop", sequence)
            tail = window[-reach:] if reach > 1 else ""
        pieces.append(piece)
    return Answer(pieces, "length")
