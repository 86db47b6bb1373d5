"""Hedging between options at the gateway: a request whose first token has not come back within after_ms
goes to a provider's API as well, the earlier first token answers, and the hedges are paid for."""

from __future__ import annotations

import numpy as np
import pytest

from firsttoken.plan.scenario import Scenario
from firsttoken.plan.simulate import simulate
from firsttoken.plan.summary import summarise

HOSTED = {"place": "aws:eu-west-1", "gpu": "h100", "model": "llama-3.1-8b", "usd_per_gpu_hour": 4.0,
          "idle_unload_s": 30}  # scaled to zero: a request after a quiet spell waits seconds for the load
API = {"place": "aws:us-east-1", "model": "gpt-4o-mini", "ttft_ms": 450, "itl_ms": 12}


def plan(hedge: dict | None, preset: str = "chat") -> Scenario:
    gateway = {"place": "lagos", **({"hedge": hedge} if hedge else {})}
    return Scenario.model_validate({
        "name": "hedge", "seed": 4, "duration_s": 3600,
        "users": {"rate_per_s": 0.03, "reuse": 1, "cities": [{"place": "lagos", "share": 1}]},
        "workload": {"preset": preset},
        "options": [{"name": "zero", "self_hosted": HOSTED, "gateway": gateway}, {"name": "api", "api": API}]})


def test_a_long_prompt_pays_slow_start_on_the_way_its_answer_took() -> None:
    plain, hedged = plan(None, "rag"), plan({"to": "api", "after_ms": 1000}, "rag")
    before = simulate(plain, plain.options[0]).journeys
    after = simulate(hedged, hedged.options[0]).journeys
    api_way = hedged.way(hedged.options[0].gateway.where, hedged.options[1].where, 0.0)
    won = [(was, now) for was, now in zip(before, after, strict=True) if now.hedge_won]
    assert any(now.far_rounds for _, now in won)  # RAG prompts: some outgrow the first window
    for was, now in won:
        sent_on = was.arrived - was.far.rtt_ms / 2000 - was.far_rounds * was.far.rtt_ms / 1000  # from the gateway
        waits = now.far_rounds * api_way.rtt_ms / 1000
        assert now.arrived == pytest.approx(sent_on + 1.0 + api_way.rtt_ms / 2000 + waits)
        assert now.slow_start_s == pytest.approx(now.far_rounds * api_way.rtt_ms / 1000
                                                 + was.slow_start_s - was.far_rounds * was.far.rtt_ms / 1000)
    summary = summarise(hedged, simulate(hedged, hedged.options[0]))
    felt = [j.first_token + j.one_way_s - j.sent for j in after]
    assert sum(summary.phases.values()) == pytest.approx(float(np.mean(felt)))  # the phases add up to it


def test_slow_first_tokens_are_hedged_and_the_earlier_answer_wins() -> None:
    plain, hedged = plan(None), plan({"to": "api", "after_ms": 1000})
    before = simulate(plain, plain.options[0]).journeys
    after = simulate(hedged, hedged.options[0]).journeys
    for was, now in zip(before, after, strict=True):
        far = was.far.rtt_ms / 2000
        waited = (was.first_token + far) - (was.arrived - far)  # at the gateway: out, and the first token back
        assert now.hedged == (waited > 1.0)
        if now.hedge_won:  # the API's first token came back sooner than the option's would have
            assert now.first_token + now.one_way_s < was.first_token + was.one_way_s
            assert now.gateway_s == pytest.approx(was.gateway_s + 1.0) and now.cold_s == 0
            assert now.front_end_s == 0  # the API's answer: no self-hosted stack's front end on it
            assert now.finished - now.first_token == pytest.approx((now.answer - 1) * 0.012)
        else:
            assert (now.first_token, now.finished) == (was.first_token, was.finished)
    won = [j for j in after if j.hedge_won]
    assert len(won) > 20 and all(j.hedged for j in won)  # the cold starts, mostly
    felt = [summarise(s, simulate(s, s.options[0])) for s in (plain, hedged)]
    assert felt[1].ttft.p99 < felt[0].ttft.p99 / 3  # seconds of loading become an API's first token
    assert felt[1].hedge_won_share == pytest.approx(len(won) / len(after))
    assert min(felt[1].phases.values()) >= 0  # the answer's phases are the API's: no queue taken back


def test_every_hedge_pays_its_prompt_and_a_winner_its_answer() -> None:
    plain, hedged = plan(None), plan({"to": "api", "after_ms": 1000})
    journeys = simulate(hedged, hedged.options[0]).journeys
    costs = [summarise(s, simulate(s, s.options[0])).usd_per_month for s in (plain, hedged)]
    prompts = np.array([j.prompt for j in journeys if j.hedged])
    answers = np.array([j.answer for j in journeys if j.hedge_won])
    bill = (prompts.sum() * 0.15 + answers.sum() * 0.6) / 1e6 * 730  # an hour of traffic, for a month
    assert costs[1] - costs[0] == pytest.approx(bill, rel=1e-6)


@pytest.mark.parametrize("to", ["zero", "nothing"])
def test_a_hedge_goes_to_an_api_option_of_the_scenario(to: str) -> None:
    with pytest.raises(ValueError, match=f"gateway.hedge.to '{to}' names no api: option .*api"):
        plan({"to": to, "after_ms": 500})
