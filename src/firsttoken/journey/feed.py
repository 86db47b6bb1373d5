"""Finished journeys, live, to whoever watches (the dashboard): each one serialised once, as an SSE event,
into every watcher's queue.

It is fed from the journey sink's batch on the event loop, so a request's own path does nothing more
for it; while no one watches, the sink skips it altogether. A watcher that reads too slowly loses the
oldest events it has not read (counted), never the gateway's memory or time.
"""

from __future__ import annotations

import asyncio
from collections import deque

import orjson

from firsttoken.journey.attribution import attribute
from firsttoken.journey.timeline import Timeline

WATCHER_BACKLOG = 2000  # events a watcher may fall behind by before its oldest are dropped


class Watcher:
    """One open dashboard's queue of SSE events."""

    def __init__(self) -> None:
        self.events: deque[bytes] = deque(maxlen=WATCHER_BACKLOG)
        self.dropped = 0
        self._ready = asyncio.Event()

    def push(self, event: bytes) -> None:
        if len(self.events) == self.events.maxlen:
            self.dropped += 1
        self.events.append(event)
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
    def __init__(self) -> None:
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

    def publish(self, timeline: Timeline, at: float) -> None:
        """A finished journey (`at`: when it arrived, unix time), to every watcher."""
        event = sse_event("journey", {**attribute(timeline).to_dict(), "at": round(at, 3)})
        for watcher in self._watchers:
            watcher.push(event)

    def broadcast(self, name: str, data: object) -> None:
        event = sse_event(name, data)
        for watcher in self._watchers:
            watcher.push(event)


def sse_event(name: str, data: object) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
