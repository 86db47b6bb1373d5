"""A serving stack's own time outside its engine, and a gateway's own time on what it forwards: each journey
must carry exactly the stated time, before the engine has it, in its own phase; nothing else may move."""

from __future__ import annotations

import numpy as np
import pytest

from firsttoken.plan.scenario import Scenario
from firsttoken.plan.serving import DEFAULT_STACK, GATEWAY, stack, stacks
from firsttoken.plan.simulate import simulate
from firsttoken.plan.summary import summarise

HOSTED = {"place": "aws:us-east-1", "gpu": "h100", "model": "llama-3.1-8b", "usd_per_gpu_hour": 4.0}


def plan(hosted: dict, gateway: dict | None = None, workload: dict | None = None) -> Scenario:
    option = {"name": "hosted", "self_hosted": {**HOSTED, **hosted}, **({"gateway": gateway} if gateway else {})}
    return Scenario.model_validate({
        "name": "serving", "seed": 5, "duration_s": 600,
        "users": {"rate_per_s": 0.05, "reuse": 1, "cities": [{"place": "nairobi", "share": 1}]},
        "workload": workload or {"preset": "chat"}, "options": [option]})


def test_the_shipped_stacks_cite_their_source_and_the_default_is_the_simulated_regions() -> None:
    assert {DEFAULT_STACK, GATEWAY, "none"} <= set(stacks())
    assert stack("none").seconds(100_000) == 0
    for name in (DEFAULT_STACK, GATEWAY):
        assert "bench/serving_front.py" in (stack(name).source or "")
        assert stack(name).seconds(8000) > stack(name).seconds(100) > 0  # longer prompts take longer
    assert plan({}).options[0].self_hosted.front_end == stack(DEFAULT_STACK)


def test_a_stacks_front_end_comes_before_the_engine_and_is_its_own_phase() -> None:
    bare, stated = plan({"stack": "none"}), plan({"stack": {"per_request_ms": 30, "per_1k_prompt_ms": 4}})
    engine_only = simulate(bare, bare.options[0]).journeys
    fronted = simulate(stated, stated.options[0]).journeys
    assert len(engine_only) == len(fronted) > 15
    for alone, with_front in zip(engine_only, fronted, strict=True):
        if any(o is not with_front and o.arrived < with_front.finished and o.finished > with_front.arrived
               for o in fronted):  # light traffic, but one now and then meets another all the same
            continue
        front = 0.030 + 0.004 * with_front.prompt / 1000
        assert alone.front_end_s == 0 and with_front.front_end_s == pytest.approx(front)
        assert with_front.arrived == alone.arrived
        assert with_front.admitted == pytest.approx(alone.admitted + front)
        assert with_front.first_token - with_front.admitted == pytest.approx(alone.first_token - alone.admitted)
    before = summarise(bare, simulate(bare, bare.options[0]))
    after = summarise(stated, simulate(stated, stated.options[0]))
    assert before.phases["front end"] == 0
    assert after.phases["front end"] == pytest.approx(np.mean([j.front_end_s for j in fronted]))
    # not counted as queue (which moves a little: arrivals meet other requests' steps at other moments)
    assert after.phases["queue"] == pytest.approx(before.phases["queue"], abs=0.001)
    assert after.ttft.p50 == pytest.approx(before.ttft.p50 + 0.030, abs=0.01)


def test_an_unknown_stack_is_refused_with_the_ones_there_are() -> None:
    with pytest.raises(ValueError, match="no shipped serving stack 'vllm-9'.*firsttoken-sim"):
        plan({"stack": "vllm-9"})


def test_a_gateway_without_its_cache_forwards_everything_and_spends_its_own_time_on_each() -> None:
    workload = {"preset": "chat", "repeats": 0.3, "paraphrases": 0.3}
    forwarding = stack(GATEWAY)
    for cache in (True, False):
        scenario = plan({}, {"place": "nairobi", "cache": cache}, workload)
        journeys = simulate(scenario, scenario.options[0]).journeys
        cached = [j for j in journeys if j.from_cache]
        if cache:
            assert cached and all(j.repeat or j.recalled for j in cached)
        else:
            assert not cached and any(j.repeat for j in journeys)
            for journey in journeys:  # no lookup: only forwarding, and the long way
                assert journey.gateway_s == pytest.approx(forwarding.seconds(journey.prompt))
                assert journey.far is not None


def test_the_plan_says_how_many_warm_connections_a_gateway_needs() -> None:
    busy = plan({}, {"place": "nairobi", "cache": False}).model_copy(
        update={"users": plan({}).users.model_copy(update={"rate_per_s": 4.0}), "duration_s": 120})
    run = simulate(busy, busy.options[0])
    summary = summarise(busy, run)
    spans = [(j.arrived - j.far.rtt_ms / 2000, j.finished + j.far.rtt_ms / 2000) for j in run.journeys]
    moments = sorted({start for start, _ in spans})
    most = max(sum(1 for start, end in spans if start <= t < end) for t in moments)  # counted the long way
    assert summary.connections_peak == most > 5
    alone = plan({})
    assert summarise(alone, simulate(alone, alone.options[0])).connections_peak is None
