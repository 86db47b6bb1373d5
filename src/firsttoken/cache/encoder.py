"""Who computes a prompt's embedding: the semantic lookup's only cost that grows with the prompt.

Two kinds, by what the model costs:
- `InlineEncoder`, for a static embedding (static_embed.py: a fraction of a millisecond): computed on the
  calling thread, since handing it to another thread and back would cost more than computing it.
- `Encoder`, for a network of layers (MiniLM: 4 ms for a few words, 85 ms for 600): one worker thread,
  shared by every lookup of a gateway. Prompts that arrive while it computes wait together and go as the
  next batch: one hop to the thread and one model call for many prompts, rather than a queue of single
  calls that contend for the same core. A lookup whose wait can be seen to be longer than `max_wait_s`
  (what is left of the batch being computed, what is queued, and its own texts, at the cost per character
  measured so far) is not embedded at all: it is skipped and counted, and deciding costs a few
  microseconds; one that waits longer than it was expected to is let go at `max_wait_s`.

Either way the request does not wait for more than its head start (edge.py): a lookup still running when
that has passed races the upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

# MiniLM on one core here: 4 ms a model call, and 0.3 ms a token more, up to the 256 tokens it reads (about
# 1 200 characters of English). The call's cost is kept as measured here; the cost per character is learned
# from each batch (a cost per character alone, learned from short questions, had a long prompt cost twice
# what it did, and skipped lookups that would have won).
CALL_S = 0.004
FIRST_GUESS_PER_CHAR_S = 0.3e-3 / 4.5
READ_CHARS = 1200  # the most of a text a model reads: a longer one costs no more
LEAST_CHARS = 16  # …and a text of a word or two, no less than this many characters
MAX_BATCH = 64
LOWEST_PRIORITY = 19  # nice
WARM_UP = "a first lookup, at start"
_LEARNING = 0.2  # how much each timed batch moves the cost per character
# A worker idle this long takes the next lookup whatever its cost says: a cost learned under load (the
# worker runs at the lowest priority, so a batch's time is mostly its wait for a core) would otherwise skip
# every lookup after the load, and no batch would ever correct it.
RELEARN_AFTER_S = 1.0

Embed = Callable[[list[str]], np.ndarray]


class InlineEncoder:
    """A static embedding's: computed where it is asked for."""

    reads_chars: int | None = None  # it reads a prompt whole (a static embedding: its head and tail, 2 000)

    def __init__(self, embed: Embed) -> None:
        self._embed = embed
        self.skipped = 0  # never: nothing queues
        self.batches = self.encoded = 0

    async def warm(self) -> None:
        self._embed([WARM_UP])  # the first call is slower than the next: at start, not counted

    def expected_wait_s(self, texts: list[str] | None = None) -> float:
        return 0.0  # a fraction of a millisecond, computed where asked

    def fits(self, texts: list[str], within_s: float | None = None) -> bool:
        return True

    async def encode(self, texts: list[str], within_s: float | None = None) -> np.ndarray | None:
        self.batches += 1
        self.encoded += len(texts)
        return self._embed(texts)

    def close(self) -> None:
        pass


class Encoder:
    """A network's: one worker thread, in batches."""

    reads_chars: int | None = READ_CHARS  # of a longer prompt its vector says nothing beyond the start

    def __init__(self, embed: Embed, max_wait_s: float) -> None:
        self._embed = embed
        self.max_wait_s = max_wait_s
        self.per_char_s = FIRST_GUESS_PER_CHAR_S
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="firsttoken-embed", initializer=_yield_the_cpu)
        self._waiting: deque[tuple[str, asyncio.Future[np.ndarray]]] = deque()
        self._queued = 0  # characters waiting, as their cost counts them
        self._running = 0  # characters in the batch being computed
        self._started = 0.0
        self._idle_since = 0.0  # when the last batch ended
        self.skipped = 0  # lookups that would have waited, or waited, too long
        self.batches = 0
        self.encoded = 0

    async def warm(self) -> None:
        """One model call on the worker before any lookup, not counted nor learned from: its thread's start
        and ONNX Runtime's first run on it cost more than the calls after, and no request should pay them."""
        await asyncio.get_running_loop().run_in_executor(self._executor, self._embed, [WARM_UP])

    def expected_wait_s(self, texts: list[str] | None = None) -> float:
        """How long texts queued now would wait for their vectors: behind the batch being computed and the
        texts queued, and then their own."""
        left = 0.0
        if self._running:
            cost, taken = CALL_S + self._running * self.per_char_s, time.monotonic() - self._started
            # A batch later than its cost is waiting for a core (the machine is busy, and the worker comes
            # last): expect it to take as long again, so that lookups are skipped, not queued behind it.
            left = cost - taken if taken < cost else taken
        own = sum(_chars(t) for t in texts or ())
        return left + (CALL_S if self._queued or own else 0.0) + (self._queued + own) * self.per_char_s

    def fits(self, texts: list[str], within_s: float | None = None) -> bool:
        """Whether texts queued now are expected to have their vectors within `within_s` (and `max_wait_s`);
        when not, the lookup is skipped and counted (a few microseconds to decide)."""
        if self.expected_wait_s(texts) <= self._limit(within_s) or self._relearning():
            return True
        self.skipped += 1
        return False

    def _limit(self, within_s: float | None) -> float:
        return self.max_wait_s if within_s is None else min(within_s, self.max_wait_s)

    def _relearning(self) -> bool:
        """Whether the cost per character was learned (from a batch) and the worker has been idle since."""
        return (self.batches > 0 and not self._running and not self._waiting
                and time.monotonic() - self._idle_since > RELEARN_AFTER_S)

    async def encode(self, texts: list[str], within_s: float | None = None) -> np.ndarray | None:
        """The texts' vectors; None when they would wait longer than `max_wait_s` (or `within_s`, when less),
        or did (skipped, counted)."""
        if not self.fits(texts, within_s):
            return None
        limit = self._limit(within_s)
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[np.ndarray]] = [loop.create_future() for _ in texts]
        for text, future in zip(texts, futures, strict=True):
            self._waiting.append((text, future))
            self._queued += _chars(text)
        if not self._running:
            self._next()
        gathered = asyncio.gather(*futures)
        gathered.add_done_callback(_retrieved)
        try:
            vectors = await asyncio.wait_for(asyncio.shield(gathered), limit)
        except TimeoutError:  # slower than its cost so far said: the lookup gives up
            self.skipped += 1
            return None
        finally:  # given up, or its request went away: what has not started is not computed
            for future in futures:
                future.cancel()
        return np.vstack(vectors)

    def _next(self) -> None:
        batch: list[tuple[str, asyncio.Future[np.ndarray]]] = []
        while self._waiting and len(batch) < MAX_BATCH:
            text, future = self._waiting.popleft()
            self._queued -= _chars(text)
            if not future.cancelled():  # its request went away meanwhile
                batch.append((text, future))
        if not batch:
            return
        self._running, self._started = sum(_chars(t) for t, _ in batch), time.monotonic()
        computed = asyncio.get_running_loop().run_in_executor(self._executor, self._embed, [t for t, _ in batch])
        computed.add_done_callback(lambda done: self._finished(batch, done))

    def _finished(self, batch: list[tuple[str, asyncio.Future[np.ndarray]]], done: asyncio.Future[np.ndarray]) -> None:
        took = time.monotonic() - self._started
        self.per_char_s += _LEARNING * (max(took - CALL_S, 0.0) / self._running - self.per_char_s)
        self._running = 0
        self._idle_since = time.monotonic()
        self.batches += 1
        self.encoded += len(batch)
        shut_down = done.cancelled()  # the worker was closed with the batch still queued
        error = None if shut_down else done.exception()
        for i, (_, future) in enumerate(batch):
            if future.done():
                continue
            if shut_down:
                future.cancel()
            elif error is not None:
                future.set_exception(error)
            else:
                future.set_result(done.result()[i])
        self._next()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _retrieved(gathered: asyncio.Future[list[np.ndarray]]) -> None:
    """A lookup's vectors that nobody waits for any more (it gave up, or its request left): their failure is
    read here, so that asyncio does not log it as never retrieved."""
    if not gathered.cancelled():
        gathered.exception()


def _yield_the_cpu() -> None:
    """The worker thread takes only the CPU that nothing else wants (Linux schedules each thread with its
    own niceness): under load, relaying answers comes before looking for a paraphrase. At 32 misses at
    once, a worker at the gateway's own priority took half of what one gateway relayed (docs/benchmarks.md)."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux, or not allowed: the default priority
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST_PRIORITY)


def _chars(text: str) -> int:
    """What a text costs the model, in characters: no fewer than its fixed cost, no more than it reads."""
    return min(max(len(text), LEAST_CHARS), READ_CHARS)
