"""One replica in real time: its engine's steps played out on the event loop, each token released at
its step's end.

Deadlines are absolute: step n ends at start + the sum of the first n step times, whatever the
event loop's own delays, so the timing never drifts (sleeps are not accumulated).

With `idle_unload_s`, a region left without traffic that long unloads its model, as scale-to-zero
platforms do; the next request waits `load_s` (weights over the load path, then the engine's start)
before anything runs, and every request that waited records the part of its wait that was the load.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from firsttoken.sim.engine import Engine, Sequence
from firsttoken.sim.lateness import Lateness
from firsttoken.sim.prefix_cache import BLOCK, PrefixCache

log = logging.getLogger("firsttoken.sim")


class Replica:
    def __init__(self, engine: Engine, idle_unload_s: float | None = None, load_s: float = 0.0) -> None:
        self.engine = engine
        self.prefix = PrefixCache(engine.kv_capacity // BLOCK)  # as many blocks as its KV cache holds
        self.idle_unload_s = idle_unload_s
        self.load_s = load_s
        self.loaded = True
        self.loads = 0
        self._listeners: dict[Sequence, Callable[[float], None]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.lateness = Lateness()  # of each step's release against its deadline

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")
        self._task.add_done_callback(_report_death)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def submit(self, sequence: Sequence, on_token: Callable[[float], None], blocks: list[bytes] | None = None) -> None:
        """Queue a request; `on_token` is called with the loop time of each of its tokens as it is released
        (synchronously, from the engine's loop: a callback, not a queue, so that a thousand streams cost a
        thousand calls per step rather than a thousand task wake-ups). `blocks`: its prompt's cacheable
        prefix, as block hashes: what this replica holds of it is not prefilled again."""
        if blocks:
            self.prefix.reuse(sequence, blocks)
        self.engine.submit(sequence)
        self._listeners[sequence] = on_token
        self._wake.set()

    def cancel(self, sequence: Sequence) -> None:
        self.engine.cancel(sequence)
        self._listeners.pop(sequence, None)

    async def _load(self, start: float) -> float:
        """Load the model back; requests arriving meanwhile wait too. Returns when it is ready."""
        ready = start + self.load_s
        await asyncio.sleep(max(0.0, ready - asyncio.get_running_loop().time()))
        for sequence in self.engine.waiting:
            sequence.cold_s = ready - max(sequence.arrived_at, start)
        self.loaded = True
        self.loads += 1
        return ready

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        while True:
            if not self.engine.busy:
                self._wake.clear()
                try:
                    async with asyncio.timeout(self.idle_unload_s if self.loaded else None):
                        await self._wake.wait()
                except TimeoutError:
                    self.loaded = False
                    self.prefix.clear()
                    log.info("idle for %.1f s: model unloaded", self.idle_unload_s)
                    continue
                now = loop.time()
            if not self.loaded:
                now = await self._load(now)
            step = self.engine.step(now)
            if step is None:  # nothing admissible: cannot happen while submit() refuses what never fits
                await asyncio.sleep(0.001)
                now = loop.time()
                continue
            now += step.duration
            delay = now - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self.lateness.record(loop.time() - now)
            listeners = self._listeners
            for sequence in step.tokens:
                on_token = listeners.get(sequence)
                if on_token is not None:
                    try:
                        on_token(now)
                    except Exception:  # one request's delivery must never stop the engine for all the others
                        log.exception("delivering a token failed; dropping that request")
                        self.cancel(sequence)
            for sequence in step.finished:
                self._listeners.pop(sequence, None)


def _report_death(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the engine of a replica stopped: %r", task.exception(), exc_info=task.exception())
