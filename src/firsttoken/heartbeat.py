"""Keeping an idle stream open: an SSE comment every few seconds until the first token.

A timer rather than a task racing each read: the upstream read stays a plain await, and the common
case (the first token arrives within the interval) costs one `call_later` and its cancel.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("firsttoken.heartbeat")


class Heartbeat:
    def __init__(self, interval: float, beat: Callable[[], Awaitable[None]]) -> None:
        self.interval = interval
        self._beat = beat
        self._active = False
        self._timer: asyncio.TimerHandle | None = None
        self._beating: asyncio.Task[None] | None = None

    @property
    def active(self) -> bool:
        return self._active

    def start(self) -> None:
        self._active = True
        if self._timer is None and self._beating is None:
            self._timer = asyncio.get_running_loop().call_later(self.interval, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._beating = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            await self._beat()
        except Exception as exc:  # the client went away: its request's own path notices and ends
            log.debug("heartbeat not sent: %s", exc)
            self._active = False
        finally:
            self._beating = None
        if self._active:
            self.start()

    async def stop(self) -> None:
        """No more beats; one already being written finishes first, so writes never interleave."""
        self._active = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._beating is not None:
            await asyncio.shield(self._beating)

    def close(self) -> None:
        """Stop at once (the request is ending for another reason)."""
        self._active = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._beating is not None:
            self._beating.cancel()
