"""Keep-warm: for upstreams marked scale-to-zero (`keep_warm:`), a minimal request (max_tokens 1) to each
model they served, when it has been idle long enough that the platform would unload it: the configured
`idle_s`, or, when none is, four fifths of how long the router saw the platform keep it idle
(routing/coldstart.py), once it has seen two cold starts: one slow first token after a pause may be a
queue, not an unload, and acting on it could spend the hour's pings in a minute. A model that no client
has asked for is not pinged, and each gets at most `max_per_hour` pings.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Protocol

import aiohttp

from firsttoken.routing.router import Router, TargetState
from firsttoken.upstream.registry import Upstreams

log = logging.getLogger("firsttoken.keepwarm")

TICK_S = 0.25
LEARNED_MARGIN = 0.8  # ping this far into the idle spell that was seen to unload the model
LEARN_AFTER = 2  # cold starts seen before their idle spells are trusted
PING = {"messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}


class PingGate(Protocol):
    """Where a gateway runs as several workers, the one place their pings go through: a ping goes only if
    no worker has used the model within `idle_s`, and one at a time (server/peers.py).

    `run` answers None when it pinged, or when a sibling holds the gate now (this worker asks again next
    tick); otherwise how many seconds ago a sibling last used or pinged the model."""

    async def run(self, label: str, idle_s: float, ping: Callable[[], Awaitable[None]]) -> float | None: ...


class KeepWarm:
    def __init__(self, router: Router, upstreams: Upstreams, gate: PingGate | None = None) -> None:
        self.router = router
        self.upstreams = upstreams
        self.gate = gate
        self.pings: dict[str, deque[float]] = {}  # per target label: when its pings went, the last hour's
        self._task: asyncio.Task[None] | None = None
        self._pinging: dict[str, asyncio.Task[None]] = {}  # a ping to a cold model takes seconds: one each
        self.sent = 0

    def start(self) -> None:
        if any(link.settings.keep_warm is not None for link in self.upstreams.links.values()):
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        for task in (self._task, *self._pinging.values()):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def due(self, state: TargetState) -> bool:
        return self._idle_needed(state) is not None

    def _idle_needed(self, state: TargetState) -> float | None:
        """The idle spell after which the target is pinged, when it has been idle that long and may be."""
        keep_warm = self.upstreams[state.target.upstream].settings.keep_warm
        if keep_warm is None:
            return None
        idle_s = keep_warm.idle_s
        learned = state.cold.unloads_after_s
        if idle_s is None and learned is not None and len(state.cold.idle_before_cold) >= LEARN_AFTER:
            idle_s = LEARNED_MARGIN * learned
        if idle_s is None or self.router.idle_for(state) < idle_s:
            return None
        sent = self.pings.setdefault(state.target.label, deque())
        hour_ago = time.monotonic() - 3600
        while sent and sent[0] < hour_ago:
            sent.popleft()
        return idle_s if len(sent) < keep_warm.max_per_hour else None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self._tick()
            except Exception:  # a bug here must not end keep-warm for the life of the process
                log.exception("keep-warm failed this tick")

    def _tick(self) -> None:
        for state in self.router.states():
            label = state.target.label
            if label in self._pinging:
                continue
            idle_s = self._idle_needed(state)
            if idle_s is not None:
                task = asyncio.get_running_loop().create_task(self._send(state, idle_s))
                self._pinging[label] = task
                task.add_done_callback(partial(self._sent, label))

    def _sent(self, label: str, task: asyncio.Task[None]) -> None:
        self._pinging.pop(label, None)

    async def _send(self, state: TargetState, idle_s: float) -> None:
        if self.gate is None:
            await self._ping(state)
            return
        used_s_ago = await self.gate.run(state.target.label, idle_s, lambda: self._ping(state))
        if used_s_ago is not None:
            # The spell starts again from the sibling's use, not from now: restarting it from now would
            # put this worker one answer's time behind, and two workers each seeing the other as used just
            # now would put each other off for ever (no ping at all).
            self.router.used_elsewhere(state, used_s_ago)

    async def _ping(self, state: TargetState) -> None:
        self.pings[state.target.label].append(time.monotonic())
        self.sent += 1
        self.router.pinged(state)
        link = self.upstreams[state.target.upstream]
        request = link.adapter.chat(dict(PING), state.target.model, False)
        session = link.pool.session
        if session is None:
            return
        try:
            async with asyncio.timeout(link.settings.timeouts.first_byte):
                async with session.post(request.url, data=request.data, headers=request.headers,
                                        allow_redirects=False) as response:
                    await response.read()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            log.info("keep-warm ping to %s failed: %s", state.target.label, exc)
