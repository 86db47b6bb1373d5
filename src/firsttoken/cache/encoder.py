"""The embedding model's one worker thread, shared by every semantic lookup of a gateway.

Prompts that arrive while it computes wait together and go as the next batch: one hop to the thread and
one model call for many prompts, rather than a queue of single calls that contend for the same core. A
prompt that would wait behind others for longer than a semantic hit is worth (`max_wait_s`: what is left
of the batch being computed, plus what is queued, at the cost per prompt measured so far) is not
embedded: the lookup is skipped and counted, and the request goes upstream at once. A miss never queues
behind other requests' embeddings for longer than that; deciding costs a few microseconds. A prompt that
finds the worker idle is always embedded.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

FIRST_GUESS_S = 0.005  # per prompt, until a batch has been timed (one short sentence on one core)
MAX_BATCH = 64
_LEARNING = 0.2  # how much each timed batch moves the cost per prompt


class Encoder:
    def __init__(self, embed: Callable[[list[str]], np.ndarray], max_wait_s: float) -> None:
        self._embed = embed
        self.max_wait_s = max_wait_s
        self.per_prompt_s = FIRST_GUESS_S
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="firsttoken-embed")
        self._waiting: deque[tuple[str, asyncio.Future[np.ndarray]]] = deque()
        self._running = 0  # prompts in the batch being computed
        self._started = 0.0
        self.skipped = 0  # lookups that would have waited too long
        self.batches = 0
        self.encoded = 0

    def expected_wait_s(self) -> float:
        """How long a prompt queued now would wait behind others before its own turn."""
        left = 0.0
        if self._running:
            left = max(0.0, self._running * self.per_prompt_s - (time.monotonic() - self._started))
        return left + len(self._waiting) * self.per_prompt_s

    async def encode(self, text: str) -> np.ndarray | None:
        """The prompt's vector; None when it would wait longer than `max_wait_s` (skipped, counted)."""
        if self.expected_wait_s() > self.max_wait_s:
            self.skipped += 1
            return None
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        self._waiting.append((text, future))
        if not self._running:
            self._next()
        return await future

    def _next(self) -> None:
        batch: list[tuple[str, asyncio.Future[np.ndarray]]] = []
        while self._waiting and len(batch) < MAX_BATCH:
            text, future = self._waiting.popleft()
            if not future.cancelled():  # its request went away meanwhile
                batch.append((text, future))
        if not batch:
            return
        self._running, self._started = len(batch), time.monotonic()
        computed = asyncio.get_running_loop().run_in_executor(self._executor, self._embed, [t for t, _ in batch])
        computed.add_done_callback(lambda done: self._finished(batch, done))

    def _finished(self, batch: list[tuple[str, asyncio.Future[np.ndarray]]], done: asyncio.Future[np.ndarray]) -> None:
        took = time.monotonic() - self._started
        self.per_prompt_s += _LEARNING * (took / len(batch) - self.per_prompt_s)
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
