"""Finished journeys, live, to whoever watches (the dashboard): each one serialised once, as an SSE event,
into every watcher's queue.

It is fed from the journey sink's batch on the event loop, so a request's own path does nothing more
for it; while no one watches, the sink skips it altogether. A watcher that reads too slowly loses the
oldest events it has not read (counted), never the gateway's memory or time.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import orjson

from firsttoken.journey.attribution import Phases, phases_on_the_wire, round_ms, tokens_per_s
from firsttoken.journey.timeline import Timeline

WATCHER_BACKLOG = 2000  # events a watcher may fall behind by before its oldest are dropped
LIVE_PER_S = 200  # journeys a second sent whole; past it, a weighted sample (failures always)


class Watcher:
    """One open dashboard's queue of SSE events."""

    def __init__(self) -> None:
        self.events: deque[bytes] = deque(maxlen=WATCHER_BACKLOG)
        self.dropped = 0
        self._ready = asyncio.Event()

    def push_all(self, events: list[bytes]) -> None:
        overflow = len(self.events) + len(events) - WATCHER_BACKLOG
        if overflow > 0:
            self.dropped += overflow
        self.events.extend(events)
        self._ready.set()

    def wake(self) -> None:
        """End a wait for events now (the watcher is leaving)."""
        self._ready.set()

    async def next_events(self, timeout: float) -> list[bytes]:
        """What arrived since the last call, waiting up to `timeout` seconds for something."""
        if not self.events:
            self._ready.clear()
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except TimeoutError:
                return []
        taken = list(self.events)
        self.events.clear()
        return taken


class JourneyFeed:
    def __init__(self, batch_s: float) -> None:
        self.batch_s = batch_s  # how often the sink publishes a batch
        self._watchers: set[Watcher] = set()

    @property
    def watched(self) -> bool:
        return bool(self._watchers)

    def watch(self) -> Watcher:
        watcher = Watcher()
        self._watchers.add(watcher)
        return watcher

    def leave(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)

    def publish(self, finished: list[tuple[Timeline, Phases, float]]) -> None:
        """A batch of finished journeys (each with when it arrived, unix time), to every watcher.

        Past LIVE_PER_S a second, the journeys that did not fail are a uniform sample, each carrying the
        `weight` it stands for (the page sums weights for counts; a uniform sample keeps percentiles): a page
        cannot show thousands of rows a second, and each one costs the gateway a few µs and a socket write."""
        budget = max(1, round(LIVE_PER_S * self.batch_s))
        failed: list[tuple[Timeline, Phases, float]] = []
        rest: list[tuple[Timeline, Phases, float]] = []
        for item in finished:
            (failed if item[0].error_code or item[0].status >= 400 else rest).append(item)
        room = max(1, budget - len(failed))
        weight = 1.0
        if len(rest) > room:
            step = len(rest) / room
            rest, weight = [rest[int(i * step)] for i in range(room)], round(step, 3)
        events = [sse_event("journey", live_journey(t, p, at)) for t, p, at in failed]
        events += [sse_event("journey", {**live_journey(t, p, at), "weight": weight}) for t, p, at in rest]
        for watcher in self._watchers:
            watcher.push_all(events)


def live_journey(timeline: Timeline, p: Phases, at: float) -> dict[str, Any]:
    """A journey as the live stream carries it: GET /v1/journeys/{id}'s shape, from the phases the sink has
    already computed, without the verdict (words, made when a row is opened) or the handshake's steps.
    Built directly: attribute() and dataclasses.asdict cost an open dashboard 60–75 µs of CPU a request
    (bench/dashboard_cost.py); this costs a few."""
    return {
        "request_id": timeline.request_id, "at": round(at, 3), "operation": timeline.operation,
        "tenant": timeline.tenant, "model": timeline.model, "route": timeline.route, "upstream": timeline.upstream,
        "stream": timeline.stream, "status": timeline.status, "attempts": timeline.attempts,
        "reused_connection": timeline.reused, "output_tokens": timeline.output_tokens,
        "input_tokens": timeline.input_tokens, "cached_input_tokens": timeline.cached_tokens,
        "token_events": timeline.token_events, "tokens_per_s": round_ms(tokens_per_s(timeline, p)),
        "itl_max_ms": round(timeline.max_gap * 1000.0, 2) if timeline.token_events > 1 else None,
        "upstream_timing": timeline.declared, "handshake": None,
        "cache": timeline.cache.header(timeline.similarity).decode(),
        "hedge": timeline.hedge.decode().removeprefix("; "),
        "cost": timeline.cost.as_dict() if timeline.cost is not None else None,
        "error": {"code": timeline.error_code, "message": timeline.error} if timeline.error_code else None,
        "api": timeline.api, "verdict": None, "phases": phases_on_the_wire(p)}


def sse_event(name: str, data: object) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
