"""The embedding worker: concurrent prompts go as one batch, a prompt that would wait too long is skipped
rather than queued (and one that waits longer than it was expected to is let go at its bound), a lookup's
texts go together, and a failure reaches every prompt of its batch without stopping the worker."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from firsttoken.cache.embed import load_embedder
from firsttoken.cache.encoder import FIRST_GUESS_PER_CHAR_S, Encoder

QUESTIONS = [f"How do I cook {food}?" for food in ("beans", "rice", "yam", "plantain", "okra", "millet")]


@pytest.fixture(scope="module")
def model():
    return load_embedder()


class Recording:
    """The real model, with the batches it was given written down."""

    def __init__(self, model, fail: bool = False) -> None:
        self.model, self.fail, self.batches = model, fail, []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.batches.append(list(texts))
        if self.fail:
            raise RuntimeError("the model broke")
        return self.model.embed(texts)


class Held:
    """The real model, held until the test sets `gate`."""

    def __init__(self, model) -> None:
        self.model, self.gate = model, threading.Event()

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.gate.wait(30)
        return self.model.embed(texts)


async def test_prompts_that_arrive_while_it_computes_go_as_one_batch(model) -> None:
    recording = Recording(model)
    encoder = Encoder(recording, max_wait_s=10)
    vectors = await asyncio.gather(*(encoder.encode([q]) for q in QUESTIONS))
    assert recording.batches == [QUESTIONS[:1], QUESTIONS[1:]]  # the first went alone; the rest waited together
    assert encoder.batches == 2 and encoder.encoded == len(QUESTIONS)
    for question, vector in zip(QUESTIONS, vectors, strict=True):
        assert float(vector[0] @ model.embed([question])[0]) > 0.9999
    encoder.close()


async def test_a_prompt_that_would_wait_too_long_is_skipped_at_once(model) -> None:
    encoder = Encoder(Recording(model), max_wait_s=15)  # room for two prompts' turns, not three
    # A cost per prompt (6 s for the shortest, at most 8 for the longest) far above what a busy machine's
    # delays can eat into while the prompts queue.
    encoder.per_char_s = 6 / min(len(q) for q in QUESTIONS)
    results = await asyncio.gather(*(encoder.encode([q]) for q in QUESTIONS))
    assert [r is None for r in results] == [False, False] + [True] * (len(QUESTIONS) - 2)
    assert encoder.skipped == len(QUESTIONS) - 2
    assert await encoder.encode(["and once it is idle again?"]) is not None
    encoder.close()


async def test_a_prompt_too_long_for_its_bound_is_skipped_without_calling_the_model(model) -> None:
    recording = Recording(model)
    encoder = Encoder(recording, max_wait_s=0.015)
    long, short = "How do I cook beans? " * 60, "How do I cook beans?"  # 1 260 characters: about 84 ms; about 5
    assert encoder.expected_wait_s([long]) > encoder.max_wait_s >= encoder.expected_wait_s([short])
    assert await encoder.encode([long]) is None
    assert recording.batches == [] and encoder.skipped == 1
    encoder.close()


async def test_a_lookup_waits_no_longer_than_its_bound(model) -> None:
    held = Held(model)
    encoder = Encoder(held, max_wait_s=0.05)
    assert await encoder.encode(["How do I cook beans?"]) is None  # the model never answered in time
    assert encoder.skipped == 1
    held.gate.set()
    encoder.close()


async def test_a_lookups_texts_go_in_one_batch_and_come_back_in_order(model) -> None:
    recording = Recording(model)
    encoder = Encoder(recording, max_wait_s=10)
    vectors = await encoder.encode(QUESTIONS[:3])
    assert recording.batches == [QUESTIONS[:3]] and vectors.shape == (3, 384)
    for question, vector in zip(QUESTIONS, vectors, strict=False):
        assert float(vector @ model.embed([question])[0]) > 0.9999
    encoder.close()


async def test_a_failure_reaches_its_batch_and_the_worker_goes_on(model) -> None:
    recording = Recording(model, fail=True)
    encoder = Encoder(recording, max_wait_s=10)
    results = await asyncio.gather(*(encoder.encode([q]) for q in QUESTIONS[:3]), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    recording.fail = False
    assert (await encoder.encode(["still there?"])).shape == (1, 384)
    encoder.close()


async def test_a_prompt_whose_request_left_is_not_embedded(model) -> None:
    recording = Recording(model)
    encoder = Encoder(recording, max_wait_s=10)
    first = asyncio.ensure_future(encoder.encode(["first"]))
    await asyncio.sleep(0)
    gone = asyncio.ensure_future(encoder.encode(["gone"]))
    kept = asyncio.ensure_future(encoder.encode(["kept"]))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.gather(first, kept)
    assert recording.batches == [["first"], ["kept"]]
    encoder.close()


async def test_a_lookup_that_could_not_end_before_the_upstream_answers_is_not_started(model) -> None:
    recording = Recording(model)
    encoder = Encoder(recording, max_wait_s=10)
    long = "How do I cook beans? " * 60  # 1 260 characters: about 80 ms, where the upstream answers in 15
    assert await encoder.encode([long], within_s=0.015) is None
    assert recording.batches == [] and encoder.skipped == 1
    assert await encoder.encode([long]) is not None  # within the worker's own bound
    encoder.close()


async def test_the_worker_is_warmed_on_its_own_thread_and_counts_nothing(model) -> None:
    threads: list[str] = []

    def noted(texts: list[str]) -> np.ndarray:
        threads.append(threading.current_thread().name)
        return model.embed(texts)

    encoder = Encoder(noted, max_wait_s=10)
    await encoder.warm()
    assert threads and threads[0].startswith("firsttoken-embed")  # the thread every lookup's call runs on
    assert (encoder.batches, encoder.encoded, encoder.per_char_s) == (0, 0, FIRST_GUESS_PER_CHAR_S)
    encoder.close()


async def test_a_batch_later_than_its_cost_makes_the_next_lookups_skip(model) -> None:
    held = Held(model)
    encoder = Encoder(held, max_wait_s=10)
    first = asyncio.ensure_future(encoder.encode(["How do I cook beans?"]))
    await asyncio.sleep(0)
    assert encoder.fits(["How do I cook rice?"], within_s=0.5)  # the batch is on time: a few ms left
    encoder._started -= 1.0  # the batch has taken a second where its cost said 5 ms: the machine is busy
    assert not encoder.fits(["How do I cook rice?"], within_s=0.5) and encoder.skipped == 1
    held.gate.set()
    assert await first is not None
    encoder.close()


async def test_a_cost_learned_under_load_is_tried_again_once_the_worker_is_idle(model) -> None:
    recording = Recording(model)
    encoder = Encoder(recording, max_wait_s=10)
    await encoder.encode(["How do I cook beans?"])
    encoder.per_char_s = 1.0  # as if that batch had waited seconds for a core
    assert not encoder.fits(["How do I cook rice?"], within_s=5)  # 19 characters: 19 s
    encoder._idle_since -= 2.0  # idle for RELEARN_AFTER_S and more: the next lookup goes, and relearns
    assert await encoder.encode(["How do I cook rice?"], within_s=5) is not None
    assert encoder.per_char_s < 0.9
    encoder.close()
