"""Coarse timers for many requests at once: deadlines and heartbeats checked by one ticker.

A per-wait `asyncio.timeout` or `call_later` costs a timer handle (a libuv timer under uvloop) for
every request; at thousands of requests a second, two or three of those per request took about a
third of the gateway's CPU. Our deadlines and heartbeats are seconds long, so one ticker every
`resolution` seconds that walks the armed alarms is exact enough, and arming one is a set insert.

The ticker also measures how late it wakes (`LoopLag`): whatever blocks the event loop, every request of
the worker waits for it, and a tick that comes late says by how much.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType

log = logging.getLogger("firsttoken.alarms")

LAG_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
STALL_S = 0.5  # a tick this late is logged: every request in the worker waited as long


class LoopLag:
    """How late the ticker woke, tick by tick: a histogram (cumulative, as Prometheus counts it)."""

    __slots__ = ("counts", "sum", "worst")

    def __init__(self) -> None:
        self.counts = [0] * (len(LAG_BUCKETS_S) + 1)  # the last: later than every bucket
        self.sum = 0.0
        self.worst = 0.0

    def observe(self, late_s: float) -> None:
        index = 0
        while index < len(LAG_BUCKETS_S) and late_s > LAG_BUCKETS_S[index]:
            index += 1
        self.counts[index] += 1
        self.sum += late_s
        if late_s > self.worst:
            self.worst = late_s
        if late_s >= STALL_S:
            log.warning("the event loop was blocked for %.2f s: every request in this worker waited as long", late_s)


class Alarm:
    __slots__ = ("when",)

    def __init__(self, when: float) -> None:
        self.when = when

    def fire(self, alarms: Alarms, now: float) -> bool:
        """Called once `when` has passed; True keeps the alarm armed (with a new `when`)."""
        raise NotImplementedError


class Alarms:
    def __init__(self, resolution: float = 0.05) -> None:
        self.resolution = resolution
        self._armed: set[Alarm] = set()
        self._ticker: asyncio.Task[None] | None = None
        self.lag = LoopLag()

    def start(self) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self._tick(), name="alarms")

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
        self._armed.clear()

    def arm(self, alarm: Alarm) -> None:
        self._armed.add(alarm)

    def disarm(self, alarm: Alarm) -> None:
        self._armed.discard(alarm)

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.resolution
            await asyncio.sleep(self.resolution)
            now = loop.time()
            self.lag.observe(max(now - due, 0.0))
            if not self._armed:
                continue
            for alarm in [a for a in self._armed if a.when <= now]:
                try:
                    keep = alarm.fire(self, now)
                except Exception:  # one broken alarm must not stop every other request's timers
                    log.exception("alarm failed")
                    keep = False
                if not keep:
                    self._armed.discard(alarm)

    # --- the kinds the gateway uses ----------------------------------------------------------

    def call_later(self, delay: float, callback: Callable[[], None]) -> Alarm:
        """Call `callback` once, at the first tick at least `delay` from now (unless disarmed)."""
        alarm = Later(self.now() + delay, callback)
        self.arm(alarm)
        return alarm

    def deadline(self, when: float) -> Deadline:
        return Deadline(self, when)

    def heartbeat(self, interval: float, beat: Callable[[], Awaitable[None]]) -> Heartbeat:
        return Heartbeat(self, interval, beat)


class Later(Alarm):
    __slots__ = ("_callback",)

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        super().__init__(when)
        self._callback = callback

    def fire(self, alarms: Alarms, now: float) -> bool:
        self._callback()
        return False


class Deadline(Alarm):
    """Like `asyncio.timeout_at`: past `when`, the task inside the block is cancelled and the block
    raises TimeoutError. `reschedule` moves the deadline (an idle timeout, renewed per chunk)."""

    __slots__ = ("_alarms", "_task", "expired")

    def __init__(self, alarms: Alarms, when: float) -> None:
        super().__init__(when)
        self._alarms = alarms
        self._task: asyncio.Task[object] | None = None
        self.expired = False

    def reschedule(self, when: float) -> None:
        self.when = when

    def fire(self, alarms: Alarms, now: float) -> bool:
        self.expired = True
        if self._task is not None:
            self._task.cancel()
        return False

    # A plain (not async) context manager: entering and leaving need no await, and skipping the
    # two coroutines per use matters at one use per write.
    def __enter__(self) -> Deadline:
        self._task = asyncio.current_task()
        self._alarms.arm(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._alarms.disarm(self)
        if self.expired and kind is asyncio.CancelledError and self._task is not None:
            if self._task.uncancel() == 0:
                raise TimeoutError from exc


class Heartbeat(Alarm):
    """While started, `beat()` every `interval` seconds (an SSE comment keeping an idle stream open).
    A beat being written finishes before `stop` returns, so writes never interleave."""

    __slots__ = ("_alarms", "interval", "_beat", "_beating", "active")

    def __init__(self, alarms: Alarms, interval: float, beat: Callable[[], Awaitable[None]]) -> None:
        super().__init__(0.0)
        self._alarms = alarms
        self.interval = interval
        self._beat = beat
        self._beating: asyncio.Task[None] | None = None
        self.active = False

    def start(self) -> None:
        if not self.active:
            self.active = True
            self.when = self._alarms.now() + self.interval
            self._alarms.arm(self)

    def fire(self, alarms: Alarms, now: float) -> bool:
        if self._beating is None:
            self._beating = asyncio.get_running_loop().create_task(self._run())
        self.when = now + self.interval
        return True

    async def _run(self) -> None:
        try:
            await self._beat()
        except Exception as exc:  # the client went away: its request's own path notices and ends
            log.debug("heartbeat not sent: %s", exc)
        finally:
            self._beating = None

    async def stop(self) -> None:
        self.active = False
        self._alarms.disarm(self)
        if self._beating is not None:
            await asyncio.shield(self._beating)

    def close(self) -> None:
        """Stop at once (the request is ending for another reason)."""
        self.active = False
        self._alarms.disarm(self)
        if self._beating is not None:
            self._beating.cancel()
