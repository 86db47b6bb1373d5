"""The router's pieces with a clock the test moves: the breaker's states, a 429's cool-down, the estimate
seeded by distance and moved by measurements, the retry budget, and the order they give."""

from __future__ import annotations

import random
import re

import pytest

from firsttoken.config import Breaker, ConfigError, Routing, validate
from firsttoken.routing.budget import Budget
from firsttoken.routing.estimate import FORGET_S, TtftEstimate
from firsttoken.routing.health import Health, State, retry_after_s
from firsttoken.routing.router import Router
from firsttoken.routing.targets import Target


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


NEAR, FAR = Target("lagos", "m"), Target("virginia", "m")
FLOORS = {"lagos": 5.0, "virginia": 130.0, "frankfurt": 90.0, "capetown": 60.0}


def router(clock: Clock, **routing: object) -> Router:
    return Router(Routing(**routing), FLOORS.get, clock, random.Random(7))


def test_the_breaker_opens_after_failures_in_a_row_and_half_opens_for_one_probe() -> None:
    health, now = Health(failures=3, open_s=10, max_open_s=40), 0.0
    for _ in range(2):
        health.failed(now)
    health.succeeded()  # in a row: a success starts the count again
    for _ in range(3):
        assert health.available(now)
        health.failed(now)
    assert health.state is State.OPEN and not health.available(now + 9.9)
    assert health.available(now + 10)  # half-open: one probe
    health.started()
    assert not health.available(now + 10)  # …and only one
    health.failed(now + 10)  # the probe failed: open twice as long
    assert not health.available(now + 29.9) and health.available(now + 30.1)
    health.started()
    health.succeeded()
    assert health.state is State.CLOSED and health.available(now + 31)


def test_a_429_cools_the_target_for_its_retry_after_without_tripping_the_breaker() -> None:
    health = Health(failures=1)
    health.rate_limited(0.0, "7")
    assert not health.available(6.9) and health.available(7.1) and health.state is State.CLOSED
    assert retry_after_s(None) == 1.0 and retry_after_s("junk") == 1.0 and retry_after_s("99999") == 300.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == pytest.approx(10.0)


def test_the_estimate_starts_at_the_floor_follows_measurements_and_drifts_back() -> None:
    estimate = TtftEstimate(130.0)
    assert estimate.value(0) == 130.0 and estimate.percentile(95) is None
    estimate.observe(400.0, 0.0)
    assert estimate.value(0) == 400.0  # the first measurement replaces the prior
    estimate.observe(100.0, 0.0)
    assert estimate.value(0) == pytest.approx(310.0)  # 30 % of the way to the new one
    assert estimate.value(FORGET_S) == pytest.approx(130.0 + 180.0 / 2.718281828, rel=1e-3)
    assert [estimate.percentile(q) for q in (0, 100)] == [100.0, 400.0]


def test_a_budget_lets_a_share_of_requests_retry_and_no_more() -> None:
    budget = Budget(0.2, reserve=2)
    assert budget.spend() and budget.spend() and not budget.spend()
    for _ in range(10):
        budget.earn()
    assert budget.spend() and budget.spend() and not budget.spend()  # 10 × 0.2, capped at the reserve anyway


def test_before_any_traffic_the_nearer_region_goes_first() -> None:
    assert router(Clock()).order("chat", [FAR, NEAR], stream=True) == [NEAR, FAR]


def test_measurements_override_distance_and_busy_targets_lose() -> None:
    clock, route = Clock(), None
    route = router(clock)
    route.started(NEAR)
    route.succeeded(NEAR, True, 900.0)  # near, but its GPUs are slow
    route.started(FAR)
    route.succeeded(FAR, True, 300.0)
    assert route.order("chat", [NEAR, FAR], stream=True) == [FAR, NEAR]
    assert route.order("chat", [NEAR, FAR], stream=False) == [NEAR, FAR]  # whole answers are measured apart
    for _ in range(20):
        route.started(FAR)  # twenty in flight: 130 + (300 − 130) × √21 > 900
    assert route.order("chat", [NEAR, FAR], stream=True) == [NEAR, FAR]


@pytest.mark.parametrize(("bias", "in_flight", "first"), [
    (0.5, 1, "capetown"),  # 60 + 30 × √2 = 102 < 150 (90 × 2 = 180 would send it to Virginia)
    (0.5, 7, "capetown"),  # 60 + 30 × √8 = 145 < 150
    (0.5, 9, "virginia"),  # 60 + 30 × √10 = 155 > 150
    (1.0, 3, "virginia"),  # 60 + 30 × 4 = 180 > 150
    (0.0, 50, "capetown"),  # load not counted at all
])
def test_load_multiplies_the_time_at_the_far_end_not_the_way_there(bias: float, in_flight: int, first: str) -> None:
    route, capetown = router(Clock(), load_bias=bias), Target("capetown", "m")
    route.started(capetown)
    route.succeeded(capetown, True, 90.0)  # 60 of it the way there and back
    route.started(FAR)
    route.succeeded(FAR, True, 150.0)
    for _ in range(in_flight):
        route.started(capetown)
    assert route.order("chat", [capetown, FAR], stream=True)[0].upstream == first


def test_an_open_or_cooling_target_goes_last_and_an_ordered_alias_keeps_its_order() -> None:
    clock = Clock()
    route = router(clock, breaker=Breaker(failures=1), ordered=["fixed"])
    route.started(NEAR)
    route.failed(NEAR)
    assert route.order("chat", [NEAR, FAR], stream=True) == [FAR, NEAR]
    assert route.order("fixed", [FAR, NEAR], stream=True) == [FAR, NEAR]
    clock.now += 11  # half-open: the near one may be probed again, and is nearer
    assert route.order("chat", [NEAR, FAR], stream=True) == [NEAR, FAR]
    route.started(FAR)
    route.rate_limited(FAR, "30")
    assert route.order("fixed", [FAR, NEAR], stream=True) == [NEAR, FAR]


def test_with_several_targets_two_are_drawn_by_weight() -> None:
    third = Target("frankfurt", "m")
    clock = Clock()
    route = router(clock, weights={"virginia/m": 1000.0})
    firsts = [route.order("chat", [NEAR, FAR, third], stream=True)[0] for _ in range(200)]
    # Drawn almost always, the heavy far one is one of the two; then the cheaper of the pair goes first.
    assert firsts.count(NEAR) + firsts.count(third) > 190 and firsts.count(third) > 0


def test_hedges_start_with_none_saved_and_wait_for_a_late_first_token() -> None:
    clock = Clock()
    route = router(clock, hedge={"budget": 0.5, "min_samples": 4, "max_s": 2.0})
    assert route.hedge_delay(NEAR) == 2.0  # nothing measured yet: the bound
    route.order("chat", [NEAR, FAR], stream=True)
    assert not route.may_hedge()  # half a token: hedges never run ahead of their share
    route.order("chat", [NEAR, FAR], stream=True)
    assert route.may_hedge() and not route.may_hedge()
    for ms in (50, 52, 55, 60, 2000):  # one stall in five: the p90 is the stall, three medians are not
        route.started(NEAR)
        route.succeeded(NEAR, True, ms)
    assert route.hedge_delay(NEAR) == pytest.approx(0.165)
    assert router(clock, hedge={"enabled": False}).hedge_delay(NEAR) is None


def test_a_steady_target_is_hedged_only_when_clearly_late() -> None:
    route = router(Clock(), hedge={"min_samples": 10, "percentile": 90})
    for ms in (100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 120):
        route.started(NEAR)
        route.succeeded(NEAR, True, ms)
    # The p90 (109 ms) is noise away from the median: wait for one and a half medians instead.
    assert route.hedge_delay(NEAR) == pytest.approx(0.1575)


@pytest.mark.parametrize(("hedge", "says"), [({"min_median_times": 4}, "min_median_times (4.0) is above"),
                                             ({"min_s": 3}, "min_s (3.0) is above max_s")])
def test_hedge_bounds_must_be_in_order(hedge: dict, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        validate({"routing": {"hedge": hedge}}, "test")


def test_keep_warm_trusts_a_learned_unload_only_after_two_cold_starts() -> None:
    from types import SimpleNamespace

    from firsttoken.config import KeepWarm as KeepWarmSettings
    from firsttoken.routing.keepwarm import KeepWarm

    clock = Clock()
    route = router(clock)
    upstreams = {"lagos": SimpleNamespace(settings=SimpleNamespace(keep_warm=KeepWarmSettings()))}
    keep_warm = KeepWarm(route, upstreams)  # type: ignore[arg-type]
    state = route.state(NEAR)

    def request_after_idle(idle_s: float, ttft_ms: float) -> None:
        clock.now += idle_s
        route.started(NEAR)
        route.succeeded(NEAR, True, ttft_ms)

    for _ in range(5):
        request_after_idle(0.1, 50.0)  # warm
    request_after_idle(1.2, 900.0)  # slow after a short pause: a queue, as it happens, not an unload
    assert state.cold.unloads_after_s == pytest.approx(1.2)
    clock.now += 1.0
    assert not keep_warm.due(state)  # one is not enough to ping every second
    request_after_idle(599.0, 950.0)  # a real unload, after 600 s idle in all
    assert state.cold.unloads_after_s == pytest.approx(600.0)  # two: the shortest of all is passed over
    clock.now += 470
    assert not keep_warm.due(state)
    clock.now += 11
    assert keep_warm.due(state)  # four fifths of 600 s


def test_keep_warm_among_workers_starts_the_spell_again_from_a_siblings_use_and_waits_out_a_busy_gate() -> None:
    # Two workers that each restarted their spell from *now* on hearing of the other's use kept putting
    # each other off: no ping went at all. The spell starts from the sibling's use instead.
    import asyncio
    from types import SimpleNamespace

    from firsttoken.config import KeepWarm as KeepWarmSettings
    from firsttoken.routing.keepwarm import KeepWarm

    class Gate:
        def __init__(self) -> None:
            self.answer: float | None = None

        async def run(self, label, idle_s, ping) -> float | None:  # type: ignore[no-untyped-def]
            return self.answer

    clock, gate = Clock(), Gate()
    route = router(clock)
    upstreams = {"lagos": SimpleNamespace(settings=SimpleNamespace(keep_warm=KeepWarmSettings(idle_s=1.0)))}
    keep_warm = KeepWarm(route, upstreams, gate)  # type: ignore[arg-type]
    state = route.state(NEAR)
    route.started(NEAR)
    route.succeeded(NEAR, True, 50.0)
    clock.now += 1.2
    assert keep_warm.due(state)

    gate.answer = 0.4  # a sibling used it 0.4 s ago
    asyncio.run(keep_warm._send(state, 1.0))
    assert route.idle_for(state) == pytest.approx(0.4)  # not 0: due when the sibling is, not a tick later
    clock.now += 0.6
    assert keep_warm.due(state)

    gate.answer = None  # a sibling holds the gate: nothing changes here, and the next tick asks again
    asyncio.run(keep_warm._send(state, 1.0))
    assert route.idle_for(state) == pytest.approx(1.0)
    assert keep_warm.due(state)

    gate.answer = 5.0  # an older use elsewhere than this worker's own does not move the spell back
    asyncio.run(keep_warm._send(state, 1.0))
    assert route.idle_for(state) == pytest.approx(1.0)
