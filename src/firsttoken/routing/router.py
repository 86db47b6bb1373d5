"""The order in which a request's targets are tried: the one expected to give the first token soonest
first, among the healthy ones.

For an alias with several targets, two candidates are drawn at random (by their configured weights)
and the one with the lower cost goes first: its expected time to first token, with the part above the
physics floor multiplied by (1 + the requests it is already serving) ** `routing.load_bias` ("power of
two choices": a target that is near but busy loses to one that is a little farther and idle, and no
single fastest target takes every burst; see TtftEstimate.cost). The rest follow by cost. Targets that
are open-circuited or cooling after a 429 go last, for when nothing else answers.
An alias listed in `routing.ordered` keeps the order it was written in.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from firsttoken.config import Routing
from firsttoken.routing.budget import Budget
from firsttoken.routing.coldstart import ColdStarts
from firsttoken.routing.estimate import TtftEstimate
from firsttoken.routing.health import Health
from firsttoken.routing.outcome import Ended, Outcome
from firsttoken.routing.targets import Target


@dataclass(slots=True)
class TargetState:
    target: Target
    health: Health
    streams: TtftEstimate  # first token of a stream
    answers: TtftEstimate  # first byte of a whole answer (all of it, generated)
    in_flight: int = 0
    weight: float = 1.0
    cold: ColdStarts = field(default_factory=ColdStarts)
    idle_since: float | None = None  # when its last request ended (None: nothing yet, or busy)
    woke_after_s: float | None = None  # how long it had been idle when its current stream started

    def estimate(self, stream: bool) -> TtftEstimate:
        return self.streams if stream else self.answers


class Router:
    def __init__(self, settings: Routing, floor_ms: Callable[[str], float | None],
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None) -> None:
        self.settings = settings
        self._floor_ms = floor_ms
        self.clock = clock
        self._random = rng or random.Random()
        self._states: dict[str, TargetState] = {}
        self.retries = Budget(settings.retry_budget)
        # Hedges start with none saved: however they cluster, they stay within their share of all requests.
        self.hedges = Budget(settings.hedge.budget, reserve=5.0, full=False)
        self.hedges_sent = 0
        self.hedges_won = 0  # by the hedge (the rest, by the first target)

    def state(self, target: Target) -> TargetState:
        found = self._states.get(target.label)
        if found is None:
            breaker = self.settings.breaker
            floor = self._floor_ms(target.upstream)
            found = self._states[target.label] = TargetState(
                target, Health(breaker.failures, breaker.open_s, breaker.max_open_s), TtftEstimate(floor),
                TtftEstimate(floor), weight=self.settings.weights.get(target.label, 1.0))
        return found

    def order(self, alias: str, targets: list[Target], stream: bool) -> list[Target]:
        """The targets in the order to try them for one request (which also earns the retry budget)."""
        self.retries.earn()
        self.hedges.earn()
        if len(targets) < 2:
            return targets
        now = self.clock()
        ready = [t for t in targets if self.state(t).health.available(now)]
        resting = [t for t in targets if t not in ready]
        if alias in self.settings.ordered or self.settings.strategy == "ordered":
            return ready + resting

        def cost(target: Target) -> float:
            state = self.state(target)
            return state.estimate(stream).cost(now, state.in_flight, self.settings.load_bias)

        ranked = sorted(ready, key=cost)
        if len(ranked) > 2:
            first, second = self._draw_two(ranked)
            ranked = [first, second] if cost(first) <= cost(second) else [second, first]
            ranked += sorted((t for t in ready if t not in ranked), key=cost)
        return ranked + resting

    def _draw_two(self, targets: list[Target]) -> tuple[Target, Target]:
        weights = [self.state(t).weight for t in targets]
        first = self._random.choices(range(len(targets)), weights)[0]
        rest = [i for i in range(len(targets)) if i != first]
        second = self._random.choices(rest, [weights[i] for i in rest])[0]
        return targets[first], targets[second]

    def may_retry(self) -> bool:
        return self.retries.spend()

    def hedge_delay(self, target: Target, stream: bool = True) -> float | None:
        """Seconds to wait for the first token from `target` (a whole answer's first byte, for one that is not
        streamed) before racing the next target: its recent p90, kept between 1.5 and 3 times its median,
        within bounds; None when hedging is off.

        The multiples of the median keep the budget for stalls. Where stalls are common (10 % and more),
        the p90 is itself a stall, hence the upper one. Where first tokens are steady, the p90 is barely
        above the median: one in ten requests would pass it by noise, spend the budget on hedges that
        could not win, and leave none for the stalls, hence the lower one."""
        hedge = self.settings.hedge
        if not hedge.enabled:
            return None
        estimate = self.state(target).estimate(stream)
        if len(estimate.recent) < hedge.min_samples:
            return hedge.max_s
        median = estimate.percentile(50) or 0.0
        late = min(max(estimate.percentile(hedge.percentile) or 0.0, hedge.min_median_times * median),
                   hedge.median_times * median)
        return min(max(late / 1000.0, hedge.min_s), hedge.max_s)

    def usual_first_token_s(self, target: Target, stream: bool) -> float | None:
        """What `target`'s first token (a whole answer's, for a request that is not streamed) has usually
        taken: the median of its recent measurements, however long ago (a quiet spell says nothing of how
        fast it answers); None before any."""
        median = self.state(target).estimate(stream).percentile(50)
        return None if median is None else median / 1000.0

    def ready(self, target: Target) -> bool:
        """Whether `target` may take a request now (not open-circuited, not cooling after a 429)."""
        return self.state(target).health.available(self.clock())

    def may_hedge(self) -> bool:
        if not self.hedges.spend():
            return False
        self.hedges_sent += 1
        return True

    # --- what happened -------------------------------------------------------------------------

    def record(self, target: Target, stream: bool, outcome: Outcome) -> None:
        """How an attempt that `started` ended: into the target's health, estimates and cooling."""
        ended = outcome.ended
        if ended is Ended.ANSWERED:
            self.succeeded(target, stream, outcome.ms)
        elif ended is Ended.BROKEN:
            self.failed(target)
        elif ended is Ended.RATE_LIMITED:
            self.rate_limited(target, outcome.retry_after)
        elif ended is Ended.LOST and outcome.ms is not None:
            self.lost(target, stream, outcome.ms)
        else:  # refused, the client's deadline, the client left: nothing of the target
            self.settled(target)

    def started(self, target: Target) -> None:
        state = self.state(target)
        if state.in_flight == 0 and state.idle_since is not None:
            state.woke_after_s = self.clock() - state.idle_since
        state.idle_since = None
        state.in_flight += 1
        state.health.started()

    def succeeded(self, target: Target, stream: bool, first_ms: float | None) -> None:
        woke_after_s = self.state(target).woke_after_s
        state = self._finish(target)
        state.health.succeeded()
        if first_ms is not None:
            state.estimate(stream).observe(first_ms, self.clock())
            if stream:
                state.cold.observe(first_ms, woke_after_s)

    def first_token(self, target: Target) -> None:
        """A stream's first token came: the target answers, so a half-open circuit closes now rather than
        when the stream ends, which may be minutes away. (How the stream ends is judged then too.)"""
        self.state(target).health.answered()

    # --- idleness, for keep-warm ----------------------------------------------------------------

    def states(self) -> list[TargetState]:
        return list(self._states.values())

    def idle_for(self, state: TargetState) -> float:
        """Seconds since its last request ended; 0 while one is under way or none has been."""
        return 0.0 if state.idle_since is None or state.in_flight else self.clock() - state.idle_since

    def pinged(self, state: TargetState) -> None:
        """A keep-warm ping went: the platform's idle timer starts again from now."""
        if state.in_flight == 0:
            state.idle_since = self.clock()

    def used_elsewhere(self, state: TargetState, seconds_ago: float) -> None:
        """Another worker of this gateway used or pinged the target that long ago: to the platform, the
        model's idle spell began then, if that is later than this worker's own last use."""
        if state.in_flight == 0:
            since = self.clock() - seconds_ago
            state.idle_since = since if state.idle_since is None else max(state.idle_since, since)

    def failed(self, target: Target) -> None:
        self._finish(target).health.failed(self.clock())

    def lost(self, target: Target, stream: bool, waited_ms: float) -> None:
        """It lost a race: its first token would have come no sooner than `waited_ms` (a lower bound, kept
        as a measurement so that a target that keeps losing stops being tried first)."""
        state = self._finish(target)
        state.health.settled()
        state.estimate(stream).observe(waited_ms, self.clock())

    def rate_limited(self, target: Target, retry_after: str | None) -> None:
        self._finish(target).health.rate_limited(self.clock(), retry_after)

    def settled(self, target: Target) -> None:
        """Ended with neither verdict: a refusal that was the client's to see (a 400, a 401)."""
        self._finish(target).health.settled()

    def _finish(self, target: Target) -> TargetState:
        state = self.state(target)
        state.in_flight = max(0, state.in_flight - 1)
        state.woke_after_s = None
        if state.in_flight == 0:
            state.idle_since = self.clock()
        return state
