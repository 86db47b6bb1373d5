"""Single flight: identical requests that arrive while the first is still being answered join it, and
take its answer as it comes, instead of each crossing to the upstream.

The first request (the leader) goes upstream as usual; its relay appends every event it reads to the
flight (the flight is the relay's capture), and its end, clean or not, ends the flight. A follower reads
the flight from its first event on, at its own pace: nothing is copied per follower, each keeps its own
position. Only requests with the same exact-cache key meet, so tenants and parameters never mix.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

from firsttoken.cache.entry import Kind
from firsttoken.journey.timeline import Timeline

CATCH_UP = 256  # events a follower relays between two turns of the event loop


class Flight:
    def __init__(self, leader: Timeline) -> None:
        self._leader = leader
        self.pieces: list[bytes] = []  # what the leader's relay read: events, each without its blank line
        self.kind: Kind | None = None  # set when the leader finished cleanly with an answer to share
        self.body: bytes | None = None  # the whole answer, then
        self.ended_well = False  # the leader's stream ended cleanly (whether or not its answer is shared)
        self.done = False
        self._changed = asyncio.Event()

    # The relay's capture: a list-like of events.
    def append(self, piece: bytes) -> None:
        self.pieces.append(piece)
        self._changed.set()

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.pieces)

    def __len__(self) -> int:
        return len(self.pieces)

    @property
    def leader(self) -> Timeline:
        """The request that went upstream for this one and its followers."""
        return self._leader

    @property
    def route(self) -> str:
        """The target that answers (the leader's, so far: final once it has answered)."""
        return self._leader.route

    def finish(self, kind: Kind | None = None, body: bytes | None = None, ended_well: bool = False) -> None:
        """The leader's end: with its whole answer when clean and fit to share; without when it failed, or
        (`ended_well`) when it ended cleanly with an answer not to share (a follower that has relayed it
        all ends as the leader did; one that has not goes upstream itself)."""
        if not self.done:
            self.kind, self.body, self.done = kind, body, True
            self.ended_well = ended_well or body is not None
            self._changed.set()

    async def follow(self) -> AsyncIterator[bytes]:
        """The leader's events from the first, as they come, until it ends. A follower far behind catches up
        CATCH_UP events at a time, letting the event loop run between: writing a client what the flight
        already holds never waits, and a follower that joined a 100 000-event answer late blocked every
        request of the worker for 100–200 ms at a time (bench/soak.py, the loop's lag)."""
        position = 0
        while True:
            while position < len(self.pieces):
                position += 1
                yield self.pieces[position - 1]
                if position % CATCH_UP == 0:
                    await asyncio.sleep(0)
            if self.done:
                return
            self._changed.clear()
            await self._changed.wait()

    async def finished(self) -> None:
        while not self.done:
            self._changed.clear()
            await self._changed.wait()


class Flights:
    """The flights in the air, by exact-cache key."""

    def __init__(self) -> None:
        self._by_key: dict[str, Flight] = {}

    def get(self, key: str) -> Flight | None:
        return self._by_key.get(key)

    def lead(self, key: str, leader: Timeline) -> Flight:
        flight = self._by_key[key] = Flight(leader)
        return flight

    def land(self, key: str, flight: Flight) -> None:
        """The leader is done (however it ended): later requests no longer join it."""
        flight.finish()  # a no-op after a clean finish; ends its followers' wait otherwise
        if self._by_key.get(key) is flight:
            del self._by_key[key]
