"""TCP's slow start in the plan: a request larger than the initial congestion window waits a round trip
for each doubling of the window it needs, on every long leg; a gateway whose host opens a larger initial
window sends the same prompt across the ocean in one."""

from __future__ import annotations

import pytest

from firsttoken.plan.network import MSS_BYTES, REQUEST_OVERHEAD_BYTES, slow_start_round_trips
from firsttoken.plan.scenario import Scenario
from firsttoken.plan.simulate import simulate
from firsttoken.plan.summary import summarise


def test_each_doubling_of_the_window_is_a_round_trip() -> None:
    segments = [1, 10, 11, 30, 31, 70, 71]  # a window of 10 lets 10, then 30, then 70 segments go
    assert slow_start_round_trips([n * MSS_BYTES for n in segments]).tolist() == [0, 0, 1, 1, 2, 2, 3]
    assert slow_start_round_trips(31 * MSS_BYTES, initial_window=32).tolist() == 0


def plan(gateway: dict | None = None, bytes_per_token: float = 4.0) -> Scenario:
    option = {"name": "far", "self_hosted": {"place": "aws:us-east-1", "usd_per_gpu_hour": 4}}
    return Scenario.model_validate({
        "name": "slow start", "seed": 2, "duration_s": 300, "path_factor": 1.5,
        "users": {"rate_per_s": 0.1, "reuse": 1, "last_mile_ms": 0, "cities": [{"place": "nairobi", "share": 1}]},
        "workload": {"preset": "rag", "bytes_per_token": bytes_per_token},
        "options": [{**option, **({"gateway": gateway} if gateway else {})}]})


def test_a_long_prompt_pays_round_trips_across_the_ocean_and_a_wider_window_spares_them() -> None:
    direct = plan()
    journeys = simulate(direct, direct.options[0]).journeys
    for journey in journeys:
        size = journey.prompt * 4.0 + REQUEST_OVERHEAD_BYTES
        rounds = int(slow_start_round_trips(size))
        assert journey.slow_start_s == pytest.approx(rounds * journey.near.rtt_ms / 1000)
    assert any(j.slow_start_s > 0 for j in journeys)  # RAG prompts: thousands of tokens, over 14 KB
    assert summarise(direct, simulate(direct, direct.options[0])).phases["slow start"] > 0.05
    # behind a gateway beside the users whose host starts from 100 segments: no round trip waits
    wide = plan({"place": "nairobi", "cache": False, "initial_window": 100})
    assert all(j.slow_start_s == 0 for j in simulate(wide, wide.options[0]).journeys)
    narrow = plan({"place": "nairobi", "cache": False})
    assert [j.slow_start_s for j in simulate(narrow, narrow.options[0]).journeys] == pytest.approx(
        [j.slow_start_s for j in journeys])  # the same long way, the same window: the same wait
    # lighter text on the wire, fewer round trips
    light = plan(bytes_per_token=1.0)
    assert sum(j.slow_start_s for j in simulate(light, light.options[0]).journeys) < sum(
        j.slow_start_s for j in journeys)
