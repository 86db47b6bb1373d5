"""Trying a request's targets: in the router's order while nothing has reached the client, each outcome
recorded with the router; a target whose first token (a whole answer, for a request that is not
streamed) is late is raced by the next.

Hedged requests ("The Tail at Scale"), at the first token, where an LLM's tail lives: the GPU queue and
the cold start. Each racer is a lane: its own attempt, its own timeline (the first lane's is the
request's own) and an outlet that holds the attempt's writes until the race is decided. The race has one
place that crowns a winner: the winner's timeline becomes the request's, its relay moves onto the
request's timeline and capture, and every other lane is cancelled at once (which closes its connection,
so its provider stops generating) and recorded as lost. A stream's lane wins with its first token, or
with an answer without one (a clean empty answer, or a refusal that is the client's to see) once no other
lane runs; a whole answer's lane wins when its answer is complete. A lane that ends without winning
leaves its failure for the race: nothing has reached the client, so the next target may be tried.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from time import perf_counter

from firsttoken.journey.timeline import Timeline
from firsttoken.relay import Capture, Relay
from firsttoken.routing.outcome import ABANDONED, Ended, Outcome
from firsttoken.routing.router import Router
from firsttoken.routing.targets import Target
from firsttoken.server.http import Headers
from firsttoken.server.outlet import Outlet
from firsttoken.server.reply import Reply

# One attempt at a target, its answer written into the outlet it is given.
AttemptAt = Callable[[Target, Outlet], Awaitable[Outcome]]


async def try_targets(router: Router, targets: list[Target], stream: bool, reply: Reply,
                      attempt: AttemptAt) -> Outcome:
    """The targets in order until one answers: a failure moves on to the next while the retry budget
    lasts and nothing has reached the client; a target that is late is raced by the next (hedged)."""
    outcome: Outcome | None = None
    waiting = list(targets)
    while waiting:
        if outcome is not None and not router.may_retry():
            break
        target = waiting.pop(0)
        delay = router.hedge_delay(target, stream) if waiting else None
        if delay is None:
            outcome = await recorded(router, target, stream, reply, attempt)
        else:
            outcome = await Race(router, stream, reply).run(target, waiting, delay, attempt)
        if not outcome.retryable:
            return outcome
    assert outcome is not None, "a request has at least one target"
    return outcome


async def recorded(router: Router, target: Target, stream: bool, outlet: Outlet, attempt: AttemptAt) -> Outcome:
    """One attempt, counted in flight while it runs, its outcome recorded (unless its race was decided
    for another attempt, which recorded it as lost)."""
    router.started(target)
    outlet.timeline.sharing = router.state(target).in_flight  # its share of a GPU-hour priced target
    try:
        outcome = await attempt(target, outlet)
    except BaseException:  # cancelled (the client left) or raised: nothing of the target
        if not outlet.lost:
            router.record(target, stream, ABANDONED)
        raise
    if not outlet.lost:
        router.record(target, stream, outcome)
    return outcome


class Lane:
    """One racer's outlet: what its attempt writes is held back until the race is decided."""

    def __init__(self, race: Race, target: Target, timeline: Timeline) -> None:
        self.race = race
        self.target = target
        self.timeline = timeline
        # The events its relay reads, for the request's capture if it wins (none when nothing captures).
        self.capture: Capture | None = [] if race.reply.capture is not None else None
        self.held: list[bytes] = []  # written by its relay before the race was decided
        self.headers: Headers = []  # its upstream's passthrough headers
        self.relay: Relay | None = None
        self.task: asyncio.Task[Outcome] | None = None
        self.in_flight = False  # its attempt began (the router counts it)
        self.ended = False  # its stream ended without winning
        self.lost = False

    @property
    def won(self) -> bool:
        return self.race.winner is self

    async def claim(self) -> bool:
        if self.race.winner is None:
            await self.race.crown(self)
        return self.won

    async def begin(self, headers: Headers, relay: Relay | None = None) -> None:
        if self.won:
            await self.race.reply.begin(headers, relay)
            return
        self.headers, self.relay = headers, relay

    async def write(self, data: bytes, last: bool = False) -> None:
        race = self.race
        if race.winner is self:
            await race.reply.write(data, last)
            return
        if race.winner is not None:
            return  # lost: it is being cancelled
        # An answer without a token: a clean empty one, or the upstream refusing the request in-stream (the
        # client's to see); a stream that broke before a token is a failure, and the next target may try.
        relay = self.relay
        answer = relay is not None and (relay.result.clean or relay.result.refused)
        if self.timeline.first_token or (last and answer and not race.others_running(self)):
            await race.crown(self)
            await race.reply.begin(self.headers)
            await race.reply.write(b"".join(self.held) + data, last)
            self.held.clear()
            return
        if last:
            self.ended = True  # no token, and another lane may still give one: nothing of it reaches the client
            return
        self.held.append(data)

    async def whole(self, status: int, body: bytes, extra: Sequence[tuple[bytes, bytes]] = (),
                    native: bytes | None = None) -> None:
        assert self.won, "a whole answer is claimed first"
        await self.race.reply.whole(status, body, extra, native)

    def moved_onto(self, reply: Reply) -> None:
        """It won: from now on its attempt is the request's, on the request's timeline and capture."""
        self.timeline = reply.timeline
        relay = self.relay
        if relay is None:
            return
        relay.timeline = reply.timeline
        if reply.capture is not None and self.capture is not None:
            for piece in self.capture:
                reply.capture.append(piece)
        relay.capture = reply.capture


class Race:
    def __init__(self, router: Router, stream: bool, reply: Reply) -> None:
        self.router = router
        self.stream = stream
        self.reply = reply  # the client's outlet, where the winner writes
        self.lanes: list[Lane] = []
        self.winner: Lane | None = None

    async def run(self, first: Target, waiting: list[Target], delay: float, attempt: AttemptAt) -> Outcome:
        """`first`, raced by the next of `waiting` when it has not answered within `delay` seconds."""
        try:
            lane = self._start(first, self.reply.timeline, attempt)
            assert lane.task is not None
            await asyncio.wait({lane.task}, timeout=delay)
            if (not lane.task.done() and self.winner is None and self.router.ready(waiting[0])
                    and self.router.may_hedge()):
                self._start(waiting.pop(0), self.reply.timeline.for_hedge(), attempt)
            return await self._finish()
        finally:
            await self._abandon()  # the client left (or a bug): no lane may run on without it

    def _start(self, target: Target, timeline: Timeline, attempt: AttemptAt) -> Lane:
        lane = Lane(self, target, timeline)

        async def run() -> Outcome:
            lane.in_flight = True
            return await recorded(self.router, target, self.stream, lane, attempt)

        lane.task = asyncio.ensure_future(run())
        self.lanes.append(lane)
        return lane

    def others_running(self, lane: Lane) -> bool:
        return any(other is not lane and not other.ended and other.task is not None and not other.task.done()
                   for other in self.lanes)

    async def crown(self, lane: Lane) -> None:
        """`lane` won: its attempt becomes the request's, and every other lane is cancelled as lost."""
        self.winner = lane
        timeline = self.reply.timeline
        if lane.timeline is not timeline:
            timeline.adopt(lane.timeline)
        lane.moved_onto(self.reply)
        first = self.lanes[0]
        if lane is not first:
            self.router.hedges_won += 1
        losers = [other for other in self.lanes if other is not lane]
        if losers:
            label = losers[0].target.label.encode()
            timeline.hedge = (b"; hedged-by=" if lane is first else b"; hedge-of=") + label
        for other in losers:
            if other.task is None or other.task.done():
                continue
            if other.in_flight:  # a hedge cancelled before it ran was never in flight
                other.lost = True
                waited_ms = (perf_counter() - other.timeline.sent) * 1000.0 if other.timeline.sent else None
                self.router.record(other.target, self.stream, Outcome(Ended.LOST, ms=waited_ms))
            other.task.cancel()  # closes its connection: the provider stops generating

    async def _finish(self) -> Outcome:
        """Wait for every lane; the winner's outcome (its exception, if it raised one), or with no winner the
        failure to report (a lane that raised, raised)."""
        outcomes = await asyncio.gather(*(lane.task for lane in self.lanes if lane.task), return_exceptions=True)
        for lane, outcome in zip(self.lanes, outcomes, strict=True):
            if lane is self.winner:
                if isinstance(outcome, BaseException):
                    raise outcome
                return outcome
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        failed = [o for o in outcomes if isinstance(o, Outcome) and o.failure is not None]
        # The client's deadline ends the request whatever else failed: it is what the client must hear.
        gave_up = [o for o in failed if o.ended is Ended.CLIENT_DEADLINE]
        chosen = gave_up or failed
        assert chosen, "a lane that did not win ends with a failure"
        return chosen[-1]

    async def _abandon(self) -> None:
        """Cancel the lanes still running and wait for them to close their connections."""
        running = [lane.task for lane in self.lanes if lane.task is not None and not lane.task.done()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
