"""Who computes a prompt's embedding, and when: the semantic lookup's only cost that grows with the prompt.

Two kinds, by what the model costs:
- `InlineEncoder`, for a static embedding (static_embed.py: a fraction of a millisecond): computed on the
  calling thread, since handing it to another thread and back would cost more than computing it.
- `Encoder`, for a network of layers (MiniLM: 10–100 ms): one worker thread, shared by every lookup of a
  gateway. Prompts that arrive while it computes wait together and go as the next batch: one hop to the
  thread and one model call for many prompts, rather than a queue of single calls that contend for the
  same core. A lookup waits at most `max_wait_s` (what a semantic hit is worth) for its vector. One whose
  wait can be seen to be longer (what is left of the batch being computed, what is queued, and its own
  text, at the cost per character measured so far) is not embedded at all: the lookup is skipped and
  counted, and the request goes upstream at once; deciding costs a few microseconds. So a slow model
  answers short questions from the cache, and long prompts go upstream without waiting for it.

Both also embed `later()`: a kept answer's prompt, when its request did not need the vector to look up (its
context had no prompt yet, or it asked not to be served from the cache). The worker takes those after the
lookups, a bounded number at a time; one past the bound is dropped and counted (its answer is kept for
exact hits all the same).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

# MiniLM on one core here: 4 ms for a few words, 0.3 ms a token more, up to the 256 tokens it reads (about
# 1 200 characters of English); per character, until a batch has been timed.
FIRST_GUESS_PER_CHAR_S = 0.3e-3 / 4.5
READ_CHARS = 1200  # the most of a text a model reads: a longer one costs no more
LEAST_CHARS = 64  # a few words cost what this many characters do (the model's fixed cost)
MAX_BATCH = 64
MAX_LATER = 256  # prompts waiting to be embedded after their answers: beyond this, dropped (counted)
MAX_LATER_BATCH = 4  # of those at a time: a lookup that comes meanwhile waits behind no more
_LEARNING = 0.2  # how much each timed batch moves the cost per prompt

Embed = Callable[[list[str]], np.ndarray]


class InlineEncoder:
    """A static embedding's: computed where it is asked for."""

    def __init__(self, embed: Embed) -> None:
        self._embed = embed
        self.skipped = self.dropped = 0  # never: nothing queues
        self.batches = self.encoded = self.for_lookups = 0

    async def encode(self, text: str) -> np.ndarray | None:
        self.for_lookups += 1
        return self.now(text)

    def later(self, text: str) -> asyncio.Future[np.ndarray] | None:
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        future.set_result(self.now(text))
        return future

    def now(self, text: str) -> np.ndarray:
        self.batches += 1
        self.encoded += 1
        return self._embed([text])[0]

    def close(self) -> None:
        pass


class Encoder:
    """A network's: one worker thread, in batches."""

    def __init__(self, embed: Embed, max_wait_s: float) -> None:
        self._embed = embed
        self.max_wait_s = max_wait_s
        self.per_char_s = FIRST_GUESS_PER_CHAR_S
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="firsttoken-embed")
        self._waiting: deque[tuple[str, asyncio.Future[np.ndarray]]] = deque()
        self._later: deque[tuple[str, asyncio.Future[np.ndarray]]] = deque()
        self._running = 0  # characters in the batch being computed (as its cost counts them)
        self._queued = 0  # characters of the lookups waiting
        self._started = 0.0
        self.skipped = 0  # lookups that would have waited too long
        self.for_lookups = 0  # prompts embedded for a lookup (the rest: after their answers)
        self.dropped = 0  # prompts not embedded after their answers: too many waiting
        self.batches = 0
        self.encoded = 0

    def expected_wait_s(self, text: str = "") -> float:
        """How long a prompt queued now would wait for its vector: behind the batch being computed and the
        lookups queued, and then its own."""
        left = 0.0
        if self._running:
            left = max(0.0, self._running * self.per_char_s - (time.monotonic() - self._started))
        return left + (self._queued + (_chars(text) if text else 0)) * self.per_char_s

    async def encode(self, text: str) -> np.ndarray | None:
        """The prompt's vector; None when it would wait longer than `max_wait_s`, or did (skipped, counted)."""
        if self.expected_wait_s(text) > self.max_wait_s:
            self.skipped += 1
            return None
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        self._waiting.append((text, future))
        self._queued += _chars(text)
        self.for_lookups += 1
        if not self._running:
            self._next()
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.max_wait_s)
        except TimeoutError:  # slower than its cost so far said: the request goes on without it
            future.cancel()  # not computed if not started; if started, nobody waits for it
            self.skipped += 1
            return None
        except asyncio.CancelledError:  # its request went away: not computed if not started
            future.cancel()
            raise

    def later(self, text: str) -> asyncio.Future[np.ndarray] | None:
        """The prompt's vector, once no lookup waits; None (dropped, counted) when too many wait already, or
        when no lookup could wait for a text this long: a prompt that only one of its length could match."""
        if len(self._later) >= MAX_LATER or _chars(text) * self.per_char_s > self.max_wait_s:
            self.dropped += 1
            return None
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        self._later.append((text, future))
        if not self._running:
            self._next()
        return future

    def _next(self) -> None:
        batch: list[tuple[str, asyncio.Future[np.ndarray]]] = []
        # Lookups alone while any wait (a request waits on them); then what waits for no request.
        lookups = bool(self._waiting)
        queue, most = (self._waiting, MAX_BATCH) if lookups else (self._later, MAX_LATER_BATCH)
        while queue and len(batch) < most:
            text, future = queue.popleft()
            if lookups:
                self._queued -= _chars(text)
            if not future.cancelled():  # its request went away meanwhile
                batch.append((text, future))
        if not batch:
            if self._waiting or self._later:
                self._next()
            return
        self._running, self._started = sum(_chars(t) for t, _ in batch), time.monotonic()
        computed = asyncio.get_running_loop().run_in_executor(self._executor, self._embed, [t for t, _ in batch])
        computed.add_done_callback(lambda done: self._finished(batch, done))

    def _finished(self, batch: list[tuple[str, asyncio.Future[np.ndarray]]], done: asyncio.Future[np.ndarray]) -> None:
        took = time.monotonic() - self._started
        self.per_char_s += _LEARNING * (took / self._running - self.per_char_s)
        self._running = 0
        self.batches += 1
        self.encoded += len(batch)
        error = done.exception()
        for i, (_, future) in enumerate(batch):
            if future.done():
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(done.result()[i])
        self._next()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _chars(text: str) -> int:
    """What a text costs the model, in characters: no fewer than its fixed cost, no more than it reads."""
    return min(max(len(text), LEAST_CHARS), READ_CHARS)
