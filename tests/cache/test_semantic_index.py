"""The semantic index with a stand-in embedder (vectors chosen by the test): the nearest prompt of the same
scope above the threshold is served only when the guards agree; scopes never meet."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from firsttoken.cache.semantic import SemanticIndex


class Chosen:
    """An embedder whose vectors the test sets: each text's vector is given, unit length."""

    dimensions = 4

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self._vectors = {t: np.asarray(v, dtype=np.float32) / np.linalg.norm(v) for t, v in vectors.items()}

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.vstack([self._vectors[t] for t in texts])


TEXTS = {
    "How do I cook beans?": [1, 0, 0, 0],
    "What is the way to cook beans?": [0.96, 0.28, 0, 0],
    "Is the museum open on Mondays?": [0, 1, 0, 0],
    "Is the museum closed on Mondays?": [0, 0.99, 0.14, 0],
    "Tell me a joke.": [0, 0, 0, 1],
}


def index() -> SemanticIndex:
    made = SemanticIndex(Chosen(TEXTS), threshold=0.85)
    made.add("scope", "How do I cook beans?", "beans")
    made.add("scope", "Is the museum open on Mondays?", "museum")
    return made


def test_a_paraphrase_is_served_with_its_similarity() -> None:
    found = index().find("scope", "What is the way to cook beans?")
    assert found.match is not None and found.match.ref == "beans" and found.match.similarity == pytest.approx(0.96)


def test_a_near_miss_is_refused_with_the_reason() -> None:
    found = index().find("scope", "Is the museum closed on Mondays?")
    assert found.match is None and found.refused and "opposites" in found.refused[0][1][0]


def test_below_the_threshold_or_in_another_scope_is_a_miss() -> None:
    made = index()
    assert made.find("scope", "Tell me a joke.").match is None
    assert made.find("other tenant", "What is the way to cook beans?").match is None


def test_a_prompt_can_be_replaced_and_removed() -> None:
    made = index()
    made.add("scope", "What is the way to cook beans?", "beans")  # the same answer, a new prompt for it
    assert len(made) == 2
    made.remove("beans")
    assert made.find("scope", "How do I cook beans?").match is None and len(made) == 1


def test_the_index_is_bounded_and_the_oldest_go_first() -> None:
    made = SemanticIndex(Chosen(TEXTS), threshold=0.85, max_prompts=2)
    made.add("scope", "How do I cook beans?", "beans")
    made.add("scope", "Is the museum open on Mondays?", "museum")
    made.add("scope", "Tell me a joke.", "joke")
    assert len(made) == 2
    assert made.find("scope", "What is the way to cook beans?").match is None  # the oldest went
    assert made.find("scope", "Tell me a joke.").match is not None


def test_restored_prompts_are_found_and_vectors_of_another_size_left_out() -> None:
    from firsttoken.cache.entry import PromptRecord

    embedder = Chosen(TEXTS)
    restored = SemanticIndex(embedder, threshold=0.85, max_prompts=2)

    def kept(ref: str, text: str) -> PromptRecord:  # as a store keeps it: float32 bytes
        return PromptRecord(ref, "scope", text, embedder.embed([text])[0].astype(np.float32).tobytes(), 0.0)

    restored.restore([kept("old", "Tell me a joke."), kept("beans", "How do I cook beans?"),
                      PromptRecord("other-model", "scope", "How do I cook beans?", b"\0" * 8, 0.0),
                      kept("museum", "Is the museum open on Mondays?")])
    assert "other-model" not in restored and "old" not in restored and len(restored) == 2  # the newest two
    found = restored.find("scope", "What is the way to cook beans?").match
    assert found is not None and found.ref == "beans"


@pytest.mark.timeout(20)
def test_prompts_come_and_go_for_as_long_as_the_gateway_runs() -> None:
    """Answers expire and are evicted all day: the index takes a prompt in and lets it go again and again
    (usearch 2.23 hung in remove() after a few dozen rounds of this)."""
    rng = np.random.default_rng(7)

    class Random:
        dimensions = 384

        def embed(self, texts: list[str]) -> np.ndarray:
            vectors = rng.random((len(texts), 384), dtype=np.float32)
            return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    made = SemanticIndex(Random(), threshold=0.85, max_prompts=8)
    for n in range(500):
        made.add(f"scope {n % 3}", f"prompt {n}", f"ref {n}")
        made.find(f"scope {n % 3}", f"question {n}")
        if n % 2:
            made.remove(f"ref {n}")
    assert len(made) <= 8 and "ref 498" in made and "ref 499" not in made


def test_the_embedder_loads_after_the_index() -> None:
    """The index first, the embedding model after (as a test process may): no crash. Importing onnxruntime
    after usearch's compiled module kills the process with a segmentation fault."""
    program = ("from firsttoken.cache.semantic import SemanticIndex\n"
               "class Flat:\n    dimensions = 4\n"
               "SemanticIndex(Flat())\n"
               "from firsttoken.cache.embed import load_embedder\n"
               "print(load_embedder().dimensions)")
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip() == "384"
