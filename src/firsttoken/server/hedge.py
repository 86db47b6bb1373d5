"""Hedged requests: when the first target's first token is late, the same request goes to the next target
too, and the first of the two to produce a token is the answer ("The Tail at Scale"'s hedged requests,
at the first token, where an LLM's tail lives: the GPU queue and the cold start). An answer that is not
streamed is raced whole (race_whole): the first complete answer wins.

For a stream:
Each racer is a lane: its own attempt, its own timeline (the first lane's is the request's own), and a
relay whose writes the race holds back until a winner is known. The first lane whose relay writes with a
token seen wins: the race adopts its timeline into the request's, hands it the request's capture,
sends the response headers (so that x-firsttoken-route names the winner and the hedge), writes what the
lane held back and lets it write straight to the client from then on. The other lane is cancelled at
once, which closes its connection, so its provider stops generating. A lane that ends without a token
is dropped, and its failure is the race's when no lane wins (nothing has reached the client, so the
next target may be tried); a stream that ended cleanly without a token (an empty answer) is an answer
once no other lane runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any

from firsttoken.errors import CLIENT_GAVE_UP, GatewayError
from firsttoken.journey.timeline import Timeline
from firsttoken.relay import Relay
from firsttoken.routing.targets import Target
from firsttoken.server.http import Headers

if TYPE_CHECKING:
    from firsttoken.routing.router import Router
    from firsttoken.server.forward import StreamForwarder


class Lane:
    def __init__(self, race: Race, target: Target, timeline: Timeline) -> None:
        self.race = race
        self.target = target
        self.timeline = timeline
        self.held: list[bytes] = []  # written by its relay before the race was decided
        self.capture: list[bytes] = []  # the events its relay read, for the request's capture if it wins
        self.headers: Headers = []  # its upstream's passthrough headers
        self.relay: Relay | None = None
        self.task: asyncio.Task[GatewayError | None] | None = None
        self.ended = False
        self.started = False  # its attempt began (the router counts it in flight)
        self.lost = False  # the race told the router already

    async def write(self, data: bytes, last: bool = False) -> None:
        """The relay's writer while racing."""
        race = self.race
        if race.winner is self:
            await race.forwarder.write(data, last)
            return
        if race.winner is not None:
            return  # lost: it is being cancelled
        # An answer without a token: a clean empty one, or the upstream refusing the request in-stream (the
        # client's to see); a stream that broke before a token is a failure, and the next target may try.
        answer = self.relay is not None and (self.relay.result.clean or self.relay.result.refused)
        if self.timeline.first_token or (last and answer and not race.others_running(self)):
            await race.crown(self)
            await race.forwarder.write(b"".join(self.held) + data, last)
            self.held.clear()
            return
        if last:
            self.ended = True  # no token, and the other may still give one: nothing of it reaches the client
            return
        self.held.append(data)

    async def claim(self) -> bool:
        """For an answer that is not a stream (a JSON body): whether it may be the response."""
        if self.race.winner is None:
            await self.race.crown(self)
        return self.race.winner is self


class Race:
    def __init__(self, forwarder: StreamForwarder) -> None:
        self.forwarder = forwarder
        self.lanes: list[Lane] = []
        self.winner: Lane | None = None

    def start(self, target: Target, timeline: Timeline,
              run: Callable[[Lane], Awaitable[GatewayError | None]]) -> Lane:
        lane = Lane(self, target, timeline)
        lane.task = asyncio.ensure_future(run(lane))
        self.lanes.append(lane)
        return lane

    def others_running(self, lane: Lane) -> bool:
        return any(other is not lane and not other.ended and other.task is not None and not other.task.done()
                   for other in self.lanes)

    async def crown(self, lane: Lane) -> None:
        self.winner = lane
        forwarder, timeline = self.forwarder, self.forwarder.timeline
        if lane.timeline is not timeline:
            timeline.adopt(lane.timeline)
            if lane.relay is not None:
                lane.relay.timeline = timeline
        losers = [other for other in self.lanes if other is not lane]
        if lane is not self.lanes[0]:
            forwarder.router.hedges_won += 1
        if losers:
            label = losers[0].target.label.encode()
            timeline.hedge = (b"; hedge-of=" if lane is not self.lanes[0] else b"; hedged-by=") + label
        if forwarder.capture is not None and lane.relay is not None:
            for piece in lane.capture:
                forwarder.capture.append(piece)
            lane.relay.capture = forwarder.capture
        elif lane.relay is not None:
            lane.relay.capture = None
        for other in losers:
            if other.task is not None and not other.task.done():
                if other.started:  # a hedge cancelled before it ran was never in flight
                    other.lost = True
                    forwarder.router.lost(other.target, True, (perf_counter() - other.timeline.sent) * 1000.0)
                other.task.cancel()  # closes its connection: the provider stops generating
        await forwarder.start(lane.headers)

    async def finish(self) -> GatewayError | None:
        """Wait for every lane; the winner's outcome (its exception, if it raised one), or with no winner the
        last failure (an exception other than a failure is a bug, and is raised)."""
        outcomes = await asyncio.gather(*(lane.task for lane in self.lanes if lane.task), return_exceptions=True)
        for lane, outcome in zip(self.lanes, outcomes, strict=True):
            if lane is self.winner:
                if isinstance(outcome, BaseException):
                    raise outcome
                return outcome
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, GatewayError):
                raise outcome
        failures = [o for o in outcomes if isinstance(o, GatewayError)]
        # The client's deadline ends the request whatever else failed: it is what the client must hear.
        gave_up = [f for f in failures if f.code == CLIENT_GAVE_UP]
        return (gave_up or failures or [None])[-1]

    async def abandon(self) -> None:
        """Cancel the lanes still running and wait for them to close their connections (the client left)."""
        running = [lane.task for lane in self.lanes if lane.task is not None and not lane.task.done()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)


# An attempt at a whole answer: the answer (anything but a GatewayError), or why there is none. The set
# holds the targets that lost a race: the router was told already.
Fetch = Callable[[Target, Timeline, set[Target]], Awaitable[Any]]


async def race_whole(router: Router, fetch: Fetch, first: Target, waiting: list[Target], delay: float,
                     timeline: Timeline) -> Any:
    """`first`, raced by the next target when its answer is later than `delay`: the first whole answer
    wins, and the other's connection is closed."""
    lost: set[Target] = set()
    lanes = {asyncio.ensure_future(fetch(first, timeline, lost)): (first, timeline)}
    pending = set(lanes)
    outcome: Any = None
    try:
        await asyncio.wait(lanes, timeout=delay)
        if not any(lane.done() for lane in lanes) and router.ready(waiting[0]) and router.may_hedge():
            second = waiting.pop(0)
            twin = timeline.for_hedge()
            lanes[asyncio.ensure_future(fetch(second, twin, lost))] = (second, twin)
        labels = [target.label.encode() for target, _ in lanes.values()]
        pending = set(lanes)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for lane in done:
                outcome = lane.result()
                if isinstance(outcome, GatewayError):
                    continue
                target, record = lanes[lane]
                for other in pending:
                    loser, its = lanes[other]
                    if its.sent:  # a hedge cancelled before it ran was never in flight
                        lost.add(loser)
                        router.lost(loser, False, (perf_counter() - its.sent) * 1000.0)
                    other.cancel()  # closes its connection
                if record is not timeline:
                    timeline.adopt(record)
                if target is not first:
                    router.hedges_won += 1
                if len(labels) > 1:
                    timeline.hedge = (b"; hedged-by=" + labels[1]) if target is first else (b"; hedge-of=" + labels[0])
                return outcome
    finally:  # the client left, or a lane raised: no lane runs on without it
        for lane in pending:
            lane.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    return outcome
