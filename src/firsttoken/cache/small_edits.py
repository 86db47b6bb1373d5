"""Small edits: a long prompt asked again with a few words changed, judged by what changed.

The embedding model reads a prompt's first 256 tokens, 90 ms or more for 600 words here, and is blind to
the rest; the guards read a new 600-word prompt's facts in 10 ms. But a long prompt asked again is most
often the same text with a word or two changed, and what it asks is then what those words say. So a
kept long prompt that shares most of its text with the new one is found by a sketch (below), the two are
compared word by word (difflib), and each change is judged in a window of the words around it: by the
guards (a number, a negation, a swapped detail…), and, unless every changed word is a filler ("the",
"please", "just"…), by the model, which then reads a few dozen tokens instead of 256. A change too large
for this (more than a tenth of the words, or more than a few places) leaves the prompt to the full lookup.

The sketch: a prompt's words are cut into chunks where a word's hash says so (content-defined: an edit
moves only the chunk it falls in; a chunk ends after 24 words all the same), and the prompt is known by
its few smallest chunk hashes (a bottom-k
sketch: two texts that share most chunks share most of these). Only a prompt's first and last 200 words
are sketched: 0.1 ms at any length, where the whole of 2 000 words took 0.6, and 32 misses arriving
together queued 20 ms behind each other's sketches (bench/gateway_phase.py, c = 32: p99 35–50 ms).
"""

from __future__ import annotations

import difflib
import heapq
from collections import Counter, OrderedDict
from dataclasses import dataclass

import numpy as np

from firsttoken.cache.guards import disagreements

LONG_WORDS = 100  # shorter prompts are read whole by the model, in 40 ms or less here: its lookup judges them
SKETCH = 8  # chunk hashes a prompt is known by
ANCHOR = 8  # a chunk ends at a word whose hash is a multiple of this: eight words a chunk, on average
SKETCHED = 200  # words at each end
SHARED = 5 / 8  # of the sketch (SKETCH, or fewer chunks): a kept prompt sharing fewer is not compared
LONGEST_CHUNK = 24  # words: a text with few anchor words (a repetitive one) is still cut into several
MOST_CHANGED = 0.1  # of the longer prompt's words
MOST_PLACES = 3
AROUND = 6  # words either side of a change, in the window it is judged in
# Words whose insertion, removal or exchange changes no question: a change of these alone needs no model.
FILLERS = frozenset("a an the please kindly just also really very quite so well okay ok".split())


@dataclass(frozen=True, slots=True)
class Edit:
    """A kept prompt that the new one differs from in a few places."""

    ref: str  # the kept answer's exact key
    windows: tuple[tuple[str, str], ...]  # (as asked, as kept): each change with the words around it
    fillers_only: bool  # every changed word is a filler

    def refused(self) -> bool:
        """Whether a guard refuses a change, read in its window (outside the windows the prompts are one)."""
        return any(disagreements(asked, kept) for asked, kept in self.windows)

    def texts(self) -> list[str]:
        """The windows, as asked and as kept, in turn: what the model reads when more than fillers changed."""
        return [text for pair in self.windows for text in pair]

    @staticmethod
    def similarity(vectors: np.ndarray) -> float:
        """The least alike of the windows' pairs, from the unit vectors of texts()."""
        return min(float(vectors[i] @ vectors[i + 1]) for i in range(0, len(vectors), 2))


class SmallEdits:
    """Kept long prompts by their sketches, per scope; bounded, the oldest forgotten first."""

    def __init__(self, max_prompts: int) -> None:
        self.max_prompts = max_prompts
        self._prompts: OrderedDict[str, tuple[str, str, tuple[int, ...]]] = OrderedDict()  # ref → (scope, text, sketch)
        self._postings: dict[tuple[str, int], dict[str, None]] = {}  # (scope, chunk hash) → refs, oldest first
        self._scopes: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._prompts)

    def holds(self, scope: str, text: str) -> bool:
        """Whether `text` is long and a long prompt of `scope` is kept: what find() needs to look at all."""
        return scope in self._scopes and is_long(text)

    def add(self, scope: str, text: str, ref: str) -> None:
        self.remove(ref)
        words = text.split()
        if len(words) < LONG_WORDS:
            return
        marks = sketch(words)
        self._prompts[ref] = (scope, text, marks)
        self._scopes[scope] += 1
        for mark in marks:
            self._postings.setdefault((scope, mark), {})[ref] = None
        while len(self._prompts) > self.max_prompts:
            self.remove(next(iter(self._prompts)))

    def remove(self, ref: str) -> None:
        kept = self._prompts.pop(ref, None)
        if kept is None:
            return
        scope, _, marks = kept
        self._scopes[scope] -= 1
        if not self._scopes[scope]:
            del self._scopes[scope]
        for mark in marks:
            refs = self._postings[(scope, mark)]
            del refs[ref]
            if not refs:
                del self._postings[(scope, mark)]

    def find(self, scope: str, text: str) -> Edit | None:
        """The kept prompt of `scope` that `text` is a small edit of, with its changes; None when none is."""
        if not self._prompts:
            return None
        words = text.split()
        if len(words) < LONG_WORDS:
            return None
        shared: Counter[str] = Counter()
        marks = sketch(words)
        for mark in marks:
            shared.update(self._postings.get((scope, mark), {}).keys())
        if not shared:
            return None
        ref, count = shared.most_common(1)[0]
        if count < SHARED * min(len(marks), len(self._prompts[ref][2])):
            return None
        return compare(ref, words, self._prompts[ref][1].split())


def is_long(text: str) -> bool:
    """At least LONG_WORDS words, counted no further."""
    return len(text.split(maxsplit=LONG_WORDS - 1)) >= LONG_WORDS


def sketch(words: list[str]) -> tuple[int, ...]:
    """The SKETCH smallest hashes of the text's content-defined chunks. Python's string hash is salted per
    process, as the index is: it is rebuilt from the store at start."""
    if len(words) > 2 * SKETCHED:
        words = words[:SKETCHED] + words[-SKETCHED:]
    chunks: list[int] = []
    start = 0
    for i, word in enumerate(words):
        if hash(word) % ANCHOR == 0 or i - start + 1 == LONGEST_CHUNK:
            chunks.append(hash(tuple(words[start:i + 1])))
            start = i + 1
    if start < len(words):
        chunks.append(hash(tuple(words[start:])))
    return tuple(heapq.nsmallest(SKETCH, set(chunks)))


def compare(ref: str, asked: list[str], kept: list[str]) -> Edit | None:
    """The changes from `kept` to `asked`, each in its window; None when they are too many to judge so."""
    matcher = difflib.SequenceMatcher(None, kept, asked, autojunk=False)
    changes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    changed = sum(max(i2 - i1, j2 - j1) for _, i1, i2, j1, j2 in changes)
    if len(changes) > MOST_PLACES or changed > MOST_CHANGED * max(len(asked), len(kept)):
        return None
    windows = tuple((" ".join(asked[max(j1 - AROUND, 0):j2 + AROUND]), " ".join(kept[max(i1 - AROUND, 0):i2 + AROUND]))
                    for _, i1, i2, j1, j2 in changes)
    words = [w for _, i1, i2, j1, j2 in changes for w in (*kept[i1:i2], *asked[j1:j2])]
    fillers_only = all(w.strip(".,;:!?").lower() in FILLERS for w in words)
    return Edit(ref, windows, fillers_only)
