"""A workload's shared prefix (an agent's instructions and tools) in the plan: a replica's prefix cache
skips its prefill from the second request on (and forgets it when the model unloads), and a provider bills
a long enough prefix at its cached-input price."""

from __future__ import annotations

import numpy as np
import pytest

from firsttoken.plan.scenario import Scenario
from firsttoken.plan.simulate import simulate
from firsttoken.plan.summary import PROVIDER_CACHE_MIN_TOKENS, summarise
from firsttoken.sim.prefix_cache import BLOCK

HOSTED = {"place": "aws:us-east-1", "gpu": "h100", "model": "llama-3.1-8b", "usd_per_gpu_hour": 4.0}
API = {"place": "aws:us-east-1", "model": "gpt-4o-mini", "ttft_ms": 400, "itl_ms": 10}


def plan(rate: float, duration: float, option: dict, **workload: object) -> Scenario:
    return Scenario.model_validate({
        "name": "prefix", "seed": 9, "duration_s": duration,
        "users": {"rate_per_s": rate, "cities": [{"place": "new york", "share": 1}]},
        "workload": {"preset": "agent", **workload}, "options": [{"name": "o", **option}]})


def test_the_prefix_is_prefilled_once_and_then_skipped() -> None:
    scenario = plan(0.05, 2000, {"self_hosted": HOSTED})  # a request every 20 s: none meets another
    run = simulate(scenario, scenario.options[0])
    deployment = scenario.options[0].self_hosted.deployment
    first, *rest = run.journeys
    assert first.prefix == min(4000, first.prompt - 1) and first.cached == 0  # nothing held yet
    held = 0  # blocks of the prefix the replica holds: what earlier requests computed
    for journey in run.journeys:
        own = journey.prefix // BLOCK
        assert journey.cached == min(min(held, own) * BLOCK, journey.prompt - 1)
        held = max(held, own)
    assert held == 4000 // BLOCK
    alone = [j for j in rest  # one now and then meets another: their steps are shared
             if not any(o is not j and o.arrived < j.finished and o.finished > j.arrived for o in run.journeys)]
    assert len(alone) > 50
    for journey in alone:
        if journey.prompt - journey.cached <= 4096:  # the rest of the prompt in one prefill step
            assert journey.first_token - journey.admitted == pytest.approx(
                deployment.mixed_step_s(0, 0, journey.prompt - journey.cached, journey.cached))


def test_a_shared_prefix_cuts_the_time_to_first_token() -> None:
    with_prefix = plan(2, 300, {"self_hosted": HOSTED})
    without = plan(2, 300, {"self_hosted": HOSTED}, shared_prefix_tokens=0)
    felt = [summarise(s, simulate(s, s.options[0])) for s in (with_prefix, without)]
    assert felt[0].prefix_cached_share > 0.3 and felt[1].prefix_cached_share == 0
    assert felt[0].phases["prefill"] < 0.7 * felt[1].phases["prefill"]
    assert felt[0].ttft.p50 < felt[1].ttft.p50


def test_an_unloaded_model_has_forgotten_the_prefix() -> None:
    scenario = plan(0.02, 3000, {"self_hosted": {**HOSTED, "idle_unload_s": 20}})  # idle ~50 s between asks
    run = simulate(scenario, scenario.options[0])
    # the first request after each unload waits the whole load, and finds nothing held
    load_s = scenario.options[0].self_hosted.cold_start_s
    woke = [j for j in run.journeys if j.cold_s == pytest.approx(load_s)]
    assert len(woke) > 10 and all(j.cached == 0 for j in woke)
    assert any(j.cached > 0 for j in run.journeys)  # while it stays loaded, the prefix is held


def test_a_provider_bills_a_long_prefix_at_its_cached_price() -> None:
    agent = plan(1, 300, {"api": API})
    plain = plan(1, 300, {"api": API}, shared_prefix_tokens=0)
    run = simulate(agent, agent.options[0])
    costs = [summarise(s, simulate(s, s.options[0])) for s in (agent, plain)]
    prompts = np.array([j.prompt for j in run.journeys])
    prefixes = np.array([j.prefix for j in run.journeys])
    api = agent.options[0].api
    saved = np.sum(np.where(prefixes >= PROVIDER_CACHE_MIN_TOKENS, prefixes, 0)) * (
        api.usd_per_million_input - api.usd_per_million_cached_input) / 1e6
    month = 730 * 3600 / 300
    assert costs[1].usd_per_month - costs[0].usd_per_month == pytest.approx(saved * month, rel=1e-6)
    assert costs[0].prefix_cached_share == pytest.approx(prefixes.sum() / prompts.sum(), rel=0.01)


def test_a_short_prefix_is_not_cached_by_a_provider() -> None:
    scenario = Scenario.model_validate({
        "name": "labels", "duration_s": 120, "users": {"rate_per_s": 1, "cities": [{"place": "lagos", "share": 1}]},
        "workload": {"preset": "classification"}, "options": [{"name": "api", "api": API}]})
    assert scenario.workload.shared_prefix_of("classification") == 160 < PROVIDER_CACHE_MIN_TOKENS
    assert summarise(scenario, simulate(scenario, scenario.options[0])).prefix_cached_share == 0
