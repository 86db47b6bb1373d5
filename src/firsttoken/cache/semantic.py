"""The semantic index: prompts kept as unit vectors in an ANN index (usearch, inner product = cosine),
each with its scope, its text and a reference to its stored answer.

A lookup takes the nearest prompts of the same scope (the scope is everything in the request but the
last user message: tenant, targets, parameters, system prompt, earlier turns; so the same question in two
conversations never meets) and serves the nearest when it is above the threshold and every guard agrees
with it. A refused candidate comes back too, with why, for the benchmark's report.

The index lives in memory; the stores keep each prompt's vector beside its answer, and restore() puts
them back after a restart, or from another gateway sharing the store.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from firsttoken.cache.embed import Embedder
from firsttoken.cache.entry import PromptRecord
from firsttoken.cache.guards import disagreements

DEFAULT_THRESHOLD = 0.85
DEFAULT_MAX_PROMPTS = 100_000  # 384 float32s each: about 150 MB of vectors with the graph, at most


@dataclass(frozen=True, slots=True)
class Match:
    ref: str  # the stored answer's exact key
    text: str
    similarity: float


@dataclass(slots=True)
class Found:
    match: Match | None
    refused: list[tuple[Match, list[str]]] = field(default_factory=list)  # near, but a guard said no


class SemanticIndex:
    def __init__(self, embedder: Embedder, threshold: float = DEFAULT_THRESHOLD, candidates: int = 8,
                 max_prompts: int = DEFAULT_MAX_PROMPTS) -> None:
        # ONNX Runtime's library loads first: loaded after usearch's, it crashes the process (usearch 2.26,
        # onnxruntime 1.32; tests/cache/test_semantic_index.py::test_the_embedder_loads_after_the_index).
        import onnxruntime  # noqa: F401
        from usearch.index import Index

        self.embedder = embedder
        self.threshold = threshold
        self.candidates = candidates
        self.max_prompts = max_prompts  # a bound: the oldest prompts go first (their answers age out first too)
        self._index = Index(ndim=embedder.dimensions, metric="ip", dtype="f32")
        self._entries: dict[int, tuple[str, str, str]] = {}  # id → (scope, text, ref)
        self._by_ref: dict[str, int] = {}
        self._scopes: Counter[str] = Counter()  # prompts kept per scope: a scope with none needs no embedding
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, ref: str) -> bool:
        return ref in self._by_ref

    def holds(self, scope: str) -> bool:
        """Whether any prompt of this scope is kept: if none is, no lookup in it can match."""
        return scope in self._scopes

    def restore(self, prompts: list[PromptRecord]) -> None:
        """Prompts a store kept (oldest first), added in one batch: no text is embedded again. Vectors of
        another size (another embedding model wrote them) are left out."""
        size = self.embedder.dimensions * 4
        fresh = [p for p in prompts if p.ref not in self._by_ref and len(p.vector) == size][-self.max_prompts:]
        if not fresh:
            return
        keys = np.array([next(self._ids) for _ in fresh], dtype=np.uint64)
        self._index.add(keys, np.vstack([np.frombuffer(p.vector, dtype=np.float32) for p in fresh]))
        for key, prompt in zip(keys.tolist(), fresh, strict=True):
            self._entries[key] = (prompt.scope, prompt.text, prompt.ref)
            self._by_ref[prompt.ref] = key
            self._scopes[prompt.scope] += 1
        self._bound()

    def vectors(self, texts: list[str]) -> np.ndarray:
        """float32, as the stores keep them."""
        return np.asarray(self.embedder.embed(texts), dtype=np.float32)

    def add(self, scope: str, text: str, ref: str, vector: np.ndarray | None = None) -> None:
        """Keep `text` (its answer stored under `ref`), replacing what `ref` had."""
        self.remove(ref)
        key = next(self._ids)
        self._index.add(key, vector if vector is not None else self.vectors([text])[0])
        self._entries[key] = (scope, text, ref)
        self._by_ref[ref] = key
        self._scopes[scope] += 1
        self._bound()

    def _bound(self) -> None:
        while len(self._entries) > self.max_prompts:
            self.remove(self._entries[next(iter(self._entries))][2])  # dicts keep insertion order: the oldest

    def remove(self, ref: str) -> None:
        key = self._by_ref.pop(ref, None)
        if key is not None:
            self._index.remove(key)
            scope = self._entries.pop(key)[0]
            self._scopes[scope] -= 1
            if not self._scopes[scope]:
                del self._scopes[scope]

    def find(self, scope: str, text: str, vector: np.ndarray | None = None) -> Found:
        found = Found(None)
        if scope not in self._scopes:
            return found
        query = vector if vector is not None else self.vectors([text])[0]
        wanted = self.candidates
        while True:  # widen the search until the scope's own candidates are among the results
            matches = self._index.search(query, min(wanted, len(self._entries)))
            same = [(int(k), 1.0 - float(d)) for k, d in zip(matches.keys, matches.distances, strict=True)
                    if int(k) in self._entries and self._entries[int(k)][0] == scope]
            if same or wanted >= len(self._entries) or wanted >= 1024:
                break
            wanted *= 4
        if not same:
            return found
        key, similarity = max(same, key=lambda pair: pair[1])
        if similarity < self.threshold:
            return found
        # Only the nearest is judged: when the guards refuse it, the question differs from what is stored in
        # a way the embedding missed, and a farther prompt is no better bet (measured: serving the next one
        # that passes made more wrong hits than guards saved).
        _, stored, ref = self._entries[key]
        candidate = Match(ref, stored, similarity)
        reasons = disagreements(text, stored)
        if reasons:
            found.refused.append((candidate, reasons))
        else:
            found.match = candidate
        return found
