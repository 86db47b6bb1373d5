"""Delivering an answer's tokens on schedule: called by the engine's loop as each token is released,
writing each event at its release time plus the distance back to the client.

Why by hand, and synchronous: aiohttp's write is a coroutine, so a stream written the usual way costs a
task wake-up per token; at a thousand streams that alone put the region tens of milliseconds behind its
schedule. Here a token is a plain call (or a timer, when the way back is long) that frames the event as
an HTTP/1.1 chunk and hands it to the transport. The response's headers and first event go through
aiohttp (`StreamResponse.prepare` and `write`), as does its end (`write_eof`), so the framing around
these chunks stays aiohttp's own.
"""

from __future__ import annotations

import asyncio

from firsttoken.sim.lateness import Lateness
from firsttoken.sim.wire import Renderer


class Delivery:
    """The tokens of one answer. The first is awaited (`first`); for a stream, the rest are written as they
    come, and `done` resolves once the last is out; for a whole answer they are only counted."""

    def __init__(self, count: int, one_way_s: float, lateness: Lateness, renderer: Renderer | None,
                 mark: int = 0) -> None:
        self.loop = asyncio.get_running_loop()
        self.count = max(count, 1)  # an answer cut to nothing by a stop sequence still takes one step
        self.one_way_s = one_way_s
        self.lateness = lateness
        self.renderer = renderer  # None: not streaming
        self.first: asyncio.Future[float] = self.loop.create_future()
        self.done: asyncio.Future[float] = self.loop.create_future()
        self.released = 0
        self.transport: asyncio.Transport | None = None
        self._pending: list[tuple[int, float]] = []  # due before the response's headers were out
        self.mark = mark  # a token whose release time is kept: the answer's first, after any thinking
        self.marked_at: float | None = None

    def __call__(self, now: float) -> None:
        """One token released by the engine at loop time `now`."""
        index = self.released
        self.released += 1
        if index == self.mark:
            self.marked_at = now
        if index == 0:
            if not self.first.done():  # cancelled when the client left before its first token
                self.first.set_result(now)
        elif self.renderer is not None:
            if self.one_way_s:
                self.loop.call_at(now + self.one_way_s, self._write, index, now)
            else:
                self._write(index, now)
            return
        if self.released == self.count:
            self._finish(now)

    def attach(self, transport: asyncio.Transport | None) -> None:
        """The headers and first event are out: write the rest to `transport` (None: the client left)."""
        self.transport = transport
        pending, self._pending = self._pending, []
        for index, now in pending:
            self._write(index, now)

    def _write(self, index: int, now: float) -> None:
        transport = self.transport
        if transport is None:
            self._pending.append((index, now))
            return
        if not transport.is_closing():  # else the client left; the handler's cancellation cleans up
            assert self.renderer is not None
            event = self.renderer.piece(index)
            if event:  # a step can say nothing (hidden thinking); an empty chunk would end the response
                transport.write(b"%x\r\n%b\r\n" % (len(event), event))  # one HTTP/1.1 chunk
            self.lateness.record(self.loop.time() - now - self.one_way_s)
        if index == self.count - 1:
            self._finish(now)

    def _finish(self, now: float) -> None:
        if not self.done.done():
            self.done.set_result(now)
