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

from firsttoken.sim.engine import Engine, Sequence

log = logging.getLogger("firsttoken.sim")


class Replica:
    def __init__(self, engine: Engine, idle_unload_s: float | None = None, load_s: float = 0.0) -> None:
        self.engine = engine
        self.idle_unload_s = idle_unload_s
        self.load_s = load_s
        self.loaded = True
        self.loads = 0
        self._listeners: dict[Sequence, asyncio.Queue[float]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def submit(self, sequence: Sequence) -> asyncio.Queue[float]:
        """Queue a request; its queue receives the loop time of each of its tokens as it is released."""
        self.engine.submit(sequence)
        queue: asyncio.Queue[float] = asyncio.Queue()
        self._listeners[sequence] = queue
        self._wake.set()
        return queue

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
            for sequence in step.tokens:
                queue = self._listeners.get(sequence)
                if queue is not None:
                    queue.put_nowait(now)
            for sequence in step.finished:
                self._listeners.pop(sequence, None)
