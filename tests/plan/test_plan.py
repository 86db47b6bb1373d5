"""`firsttoken plan`: the scenario's traffic through the simulated region's engine in virtual time. Each
journey must add up to what the parts say it should: the network model's round trips and handshakes, the
deployment's own step times, a provider's published pace; more traffic must queue and more replicas must
take the queue back; the same seed must give the same plan; a bad scenario is refused with its key."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from firsttoken.cli import main
from firsttoken.geo.places import resolve
from firsttoken.plan.network import route
from firsttoken.plan.scenario import MeasuredRtt, Scenario, ScenarioError, load
from firsttoken.plan.serving import GATEWAY, stack
from firsttoken.plan.simulate import simulate
from firsttoken.plan.summary import summarise

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lagos.yaml"
HOSTED = {"place": "aws:us-east-1", "gpu": "h100", "model": "llama-3.1-8b", "usd_per_gpu_hour": 4.0}
API = {"place": "aws:eu-west-1", "model": "m", "ttft_ms": 400, "itl_ms": 12, "usd_per_million_input": 0.15,
       "usd_per_million_output": 0.6}


def scenario(rate: float, duration: float = 300, reuse: float = 0.0, **hosted: object) -> Scenario:
    return Scenario.model_validate({
        "name": "test", "seed": 3, "duration_s": duration,
        "users": {"rate_per_s": rate, "last_mile_ms": 20, "reuse": reuse,
                  "cities": [{"place": "lagos", "share": 3}, {"place": "nairobi", "share": 1, "last_mile_ms": 40}]},
        "options": [{"name": "hosted", "self_hosted": {**HOSTED, **hosted}}, {"name": "api", "api": API}]})


def test_the_network_is_the_floor_times_the_path_factor_plus_the_last_mile() -> None:
    lagos, virginia = resolve("lagos"), resolve("aws:us-east-1")
    way = route(lagos, virginia, 1.5, 25)
    assert way.floor_ms == pytest.approx(lagos.floor_ms(virginia))
    assert 80 < way.floor_ms < 95  # 8 400 km of great circle, there and back at 204 000 km/s
    assert way.rtt_ms == pytest.approx(way.floor_ms * 1.5 + 25)
    assert way.handshakes_ms == pytest.approx(25 + 2 * way.rtt_ms)  # DNS at the ISP, then TCP and TLS 1.3


def test_alone_a_request_takes_the_network_plus_the_deployments_own_prefill_and_decode() -> None:
    plan = scenario(rate=0.02, duration=2000)  # about one request a minute: none meets another
    hosted = plan.options[0]
    run = simulate(plan, hosted)
    deployment = hosted.self_hosted.deployment
    alone = [j for j in run.journeys  # one now and then meets another all the same
             if not any(o is not j and o.arrived < j.finished and o.finished > j.arrived for o in run.journeys)]
    assert len(alone) > 20
    for journey in alone:
        assert journey.arrived == pytest.approx(journey.sent + journey.handshakes_s + journey.one_way_s
                                                + journey.slow_start_s)
        # nothing ahead of it: its engine starts on it once the stack's front end is done
        assert journey.front_end_s == pytest.approx(hosted.self_hosted.front_end.seconds(journey.prompt))
        assert journey.front_end_s > 0
        assert journey.admitted == pytest.approx(journey.arrived + journey.front_end_s)
        if journey.prompt <= 4096:  # one prefill step (the engine's token budget), which samples the first token
            assert journey.first_token - journey.admitted == pytest.approx(
                deployment.mixed_step_s(0, 0, journey.prompt, 0))
        # then one decode step per token, each reading the weights and the context so far
        steps = sum(deployment.mixed_step_s(1, journey.prompt + n, 0, 0) for n in range(1, journey.answer))
        assert journey.finished - journey.first_token == pytest.approx(steps)
    summary = summarise(plan, run)
    felt = [j.first_token + j.one_way_s - j.sent for j in run.journeys]
    assert summary.ttft.p50 == pytest.approx(float(np.median(felt)))
    assert sum(summary.phases.values()) == pytest.approx(float(np.mean(felt)))  # the phases add up to it


def test_an_api_answers_at_its_published_pace() -> None:
    plan = scenario(rate=1)
    run = simulate(plan, plan.options[1])
    ttfts = [j.first_token - j.arrived for j in run.journeys]
    assert np.median(ttfts) == pytest.approx(0.4, rel=0.05)
    assert all(j.finished - j.first_token == pytest.approx((j.answer - 1) * 0.012) for j in run.journeys)
    summary = summarise(plan, run)
    tokens = sum((j.prompt * 0.15 + j.answer * 0.6) / 1e6 for j in run.journeys)
    assert summary.usd_per_month == pytest.approx(tokens * 730 * 3600 / 300)


def test_connections_already_open_pay_no_handshakes() -> None:
    cold = summarise(scenario(rate=0.5), simulate(scenario(rate=0.5), scenario(rate=0.5).options[1]))
    warm_plan = scenario(rate=0.5, reuse=1.0)
    warm = summarise(warm_plan, simulate(warm_plan, warm_plan.options[1]))
    assert warm.phases["handshakes"] == 0
    assert cold.phases["handshakes"] > 0.2  # two round trips across the Atlantic, and a DNS lookup
    assert warm.ttft.p50 < cold.ttft.p50 - 0.2


def test_more_traffic_queues_and_more_replicas_take_the_queue_back() -> None:
    # Thirty chats a second are more than one H100's steps can keep up with, and fewer than three's.
    plans = {"one": scenario(rate=30, duration=120), "three": scenario(rate=30, duration=120, replicas=3),
             "quiet": scenario(rate=0.5, duration=120)}
    runs = {name: summarise(plan, simulate(plan, plan.options[0])) for name, plan in plans.items()}
    assert runs["one"].phases["queue"] > 100 * runs["three"].phases["queue"]
    assert runs["one"].ttft.p95 > 10 * runs["three"].ttft.p95
    assert runs["three"].ttft.p95 > runs["quiet"].ttft.p95  # three replicas still batch more than one quiet one
    assert runs["one"].gpu_utilisation == pytest.approx(1.0, abs=0.01)  # never idle once the queue forms
    assert runs["quiet"].gpu_utilisation < 0.8  # a request alone keeps it busy through its decode all the same
    assert runs["three"].usd_per_month == pytest.approx(3 * runs["one"].usd_per_month)


def test_every_option_meets_the_same_requests_and_the_same_seed_the_same_plan() -> None:
    plan = scenario(rate=2, duration=60)
    first, second = (simulate(plan, option) for option in plan.options)
    assert sorted((j.sent, j.prompt, j.answer, j.city) for j in first.journeys) == \
        sorted((j.sent, j.prompt, j.answer, j.city) for j in second.journeys)
    again = simulate(plan, plan.options[0])
    assert summarise(plan, again) == summarise(plan, first)


@pytest.mark.parametrize(("change", "words"), [
    ({"users": {"rate_per_s": 1, "cities": [{"place": "lagoss", "share": 1}]}}, "users.cities.0"),
    ({"options": [{"name": "x", "self_hosted": {**HOSTED, "gpu": "h1000"}}]}, "unknown gpu 'h1000'"),
    ({"options": [{"name": "x", "self_hosted": HOSTED, "api": API}]}, "either self_hosted: or api:"),
    ({"options": [{"name": "x", "api": API}, {"name": "x", "api": API}]}, "a name of its own"),
    ({"users": {"rate_per_s": 0, "cities": [{"place": "lagos", "share": 1}]}}, "users.rate_per_s"),
])
def test_a_scenario_that_cannot_run_is_refused_with_its_key(tmp_path, change: dict, words: str) -> None:
    base = {"name": "bad", "users": {"rate_per_s": 1, "cities": [{"place": "lagos", "share": 1}]},
            "options": [{"name": "x", "api": API}]}
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps({**base, **change}))  # JSON is YAML
    with pytest.raises(ScenarioError, match=words.replace("(", r"\(")):
        load(path)


def test_the_command_compares_the_shipped_example_in_the_terminal_and_as_json() -> None:
    runner = CliRunner()
    table = runner.invoke(main, ["plan", str(EXAMPLE), "--duration", "60"])
    assert table.exit_code == 0, table.output
    assert "fastest first token" in table.output and "Nairobi".lower() in table.output.lower()
    answer = runner.invoke(main, ["plan", str(EXAMPLE), "--duration", "60", "--json"])
    assert answer.exit_code == 0, answer.output
    plan = json.loads(answer.output)
    assert len(plan["options"]) == 7 and plan["recommendation"]
    lagos = next(o for o in plan["options"] if o["name"].startswith("Lagos"))
    virginia = next(o for o in plan["options"] if o["name"].startswith("us-east-1"))
    assert lagos["ttft"]["p95"] < virginia["ttft"]["p95"]  # the ocean is not free
    refused = runner.invoke(main, ["plan", str(EXAMPLE.with_name("missing.yaml"))])
    assert refused.exit_code == 2 and "missing.yaml" in refused.output


def test_a_gateway_near_the_users_spares_them_the_long_handshakes_and_answers_repeats() -> None:
    plan = Scenario.model_validate({
        "name": "gateway", "seed": 5, "duration_s": 300,
        "users": {"rate_per_s": 1, "last_mile_ms": 20, "cities": [{"place": "lagos", "share": 1}]},
        "workload": {"preset": "chat", "repeats": 0.3},
        "options": [{"name": "direct", "api": API},
                    {"name": "via lagos", "api": API, "gateway": {"place": "lagos", "usd_per_month": 50}}]})
    direct, via = (simulate(plan, option) for option in plan.options)
    hits = [j for j in via.journeys if j.far is None]
    assert len(hits) == sum(j.repeat for j in via.journeys) and 0.25 < len(hits) / len(via.journeys) < 0.35
    for journey in via.journeys:
        near = journey.near
        assert near.floor_ms < 5  # Lagos to a gateway in Lagos
        assert journey.handshakes_s in (0.0, pytest.approx(near.handshakes_ms / 1000))
        if journey.far is None:  # the edge cache: there and back to the gateway, and its hit
            assert journey.first_token + journey.one_way_s - journey.sent == pytest.approx(
                journey.handshakes_s + near.rtt_ms / 1000 + journey.slow_start_s + 0.0005)
        else:  # across the ocean on a warm connection: no handshake on the long way
            assert journey.far.last_mile_ms == 0
            assert journey.arrived == pytest.approx(  # and the gateway's forwarding (the look in other words
                journey.sent + journey.handshakes_s + (near.rtt_ms + journey.far.rtt_ms) / 2000  # races it)
                + journey.slow_start_s + stack(GATEWAY).seconds(journey.prompt))
    plain, gated = summarise(plan, direct), summarise(plan, via)
    assert gated.cache_hits == len(hits) and plain.cache_hits == 0
    assert gated.phases["handshakes"] < plain.phases["handshakes"] / 3  # a last mile and round trips in Lagos
    assert gated.ttft.p50 < plain.ttft.p50 - 0.1
    # the hits cost the API nothing; the gateway its own price
    tokens = sum((j.prompt * 0.15 + j.answer * 0.6) / 1e6 for j in via.journeys if j.far is not None)
    assert gated.usd_per_month == pytest.approx(tokens * 730 * 3600 / 300 + 50)


def test_scaled_to_zero_a_model_loads_back_after_an_idle_spell_and_is_billed_while_loaded() -> None:
    plan = scenario(rate=0.01, duration=3000, idle_unload_s=60)  # a request every 100 s, on average
    hosted = plan.options[0].self_hosted
    run = simulate(plan, plan.options[0])
    load_s = hosted.cold_start_s
    assert 9 < load_s < 10  # 16 GB at 3.65 GB/s, and the engine's start
    cold = [j for j in run.journeys if j.cold_s > 0]
    woke = [j for j in cold if j.cold_s == pytest.approx(load_s)]  # arrived to an unloaded model
    assert run.served.cold_starts == len(woke) > 5
    for journey in cold:  # the others arrived while it loaded, and waited for the rest of the load
        assert journey.admitted - journey.arrived - journey.front_end_s == pytest.approx(journey.cold_s)
        assert journey.cold_s <= load_s + 1e-9
    summary = summarise(plan, run)
    assert summary.cold_starts == len(woke)
    assert summary.phases["cold start"] == pytest.approx(sum(j.cold_s for j in cold) / len(run.journeys))
    always_on = summarise(scenario(rate=0.01, duration=3000), simulate(scenario(rate=0.01, duration=3000),
                                                                        scenario(rate=0.01, duration=3000).options[0]))
    assert summary.usd_per_month < always_on.usd_per_month * 0.8
    assert summary.usd_per_month == pytest.approx(4.0 * 730 * run.served.loaded_s / run.served.until)


def test_options_run_in_processes_of_their_own_give_the_same_plan() -> None:
    from firsttoken.plan.compare import compare

    plan = scenario(rate=1, duration=60)
    assert compare(plan, processes=2) == compare(plan)


@pytest.mark.parametrize("kwargs", [{"rate": 3}, {"rate": 30, "replicas": 3}, {"rate": 40},
                                    {"rate": 0.05, "idle_unload_s": 20}])
def test_skipping_ahead_through_pure_decode_gives_the_same_journeys_as_stepping(kwargs: dict) -> None:
    plan = scenario(duration=60, **kwargs)
    fast, slow = (simulate(plan, plan.options[0], fast=f) for f in (True, False))
    for a, b in zip(fast.journeys, slow.journeys, strict=True):
        assert (a.admitted, a.first_token, a.finished, a.cold_s) == pytest.approx(
            (b.admitted, b.first_token, b.finished, b.cold_s), abs=1e-9)
    assert fast.served.busy_s == pytest.approx(slow.served.busy_s, rel=1e-9)


SEARCH = Path(__file__).resolve().parents[2] / "examples" / "lagos-search.yaml"


def test_a_search_runs_its_grid_and_shows_the_options_nothing_beats_on_speed_and_cost() -> None:
    from firsttoken.plan.search import grid, pareto

    plan = load(SEARCH).model_copy(update={"duration_s": 60})
    search = plan.search.model_copy(update={"vary": {**plan.search.vary, "model": ["llama-3.1-8b", "llama-3.1-405b"]}})
    options, left_out = grid(search)
    assert len(options) == 16 and len(left_out) == 16  # 405B does not fit two H100s, at any place
    assert all("llama-3.1-405b" in reason for reason in left_out)
    assert {o.self_hosted.usd_per_gpu_hour for o in options} == {3.5, 4.0, 5.5, 8.0}  # each place's price
    summaries = [summarise(plan, simulate(plan, option)) for option in options]
    front = pareto(summaries)
    assert 1 < len(front) < len(summaries)
    for s in summaries:  # nothing on the front is beaten on both; everything off it is, or nearly
        cheaper = [f for f in front if f.usd_per_month <= s.usd_per_month and f is not s]
        if s in front:
            assert not any(o.usd_per_month <= s.usd_per_month and o.ttft.p95 < s.ttft.p95 * 0.99
                           for o in summaries if o is not s)
        else:
            assert any(f.ttft.p95 <= s.ttft.p95 / 0.99 for f in cheaper)
    runner = CliRunner()
    answer = runner.invoke(main, ["plan", str(SEARCH), "--search", "--duration", "30", "--json"])
    assert answer.exit_code == 0, answer.output
    result = json.loads(answer.output)
    assert len(result["options"]) == 32 and result["left_out"] == [] and result["front"]
    assert set(result["front"]) <= {o["name"] for o in result["options"]}
    plain = runner.invoke(main, ["plan", str(EXAMPLE), "--search"])
    # The message wraps at the terminal's width, wherever the path to the example ends.
    assert plain.exit_code == 2 and "no search: grid" in " ".join(plain.output.split())


def test_the_recommendation_names_a_cheaper_option_nearly_as_fast() -> None:
    from dataclasses import replace

    from firsttoken.plan.summary import Spread, recommend

    plan = scenario(rate=1, duration=60)
    hosted, api = (summarise(plan, simulate(plan, o)) for o in plan.options)
    fast = replace(hosted, name="fast", ttft=Spread(0.3, 0.40, 0.5), usd_per_month=1000.0)
    near = replace(hosted, name="near", ttft=Spread(0.3, 0.43, 0.5), usd_per_month=600.0)
    slow = replace(api, name="slow", ttft=Spread(0.9, 1.20, 1.5), usd_per_month=300.0)
    said = recommend([slow, near, fast])
    assert said.startswith("fast gives these users the fastest first token: p95 0.40 s against 1.20 s for slow")
    assert "Nearly as fast, near (p95 0.43 s) costs 40% less." in said
    # one that is not within a tenth of the fastest is not offered as nearly as fast
    assert "Nearly" not in recommend([slow, replace(near, ttft=Spread(0.3, 0.50, 0.6)), fast])


def test_a_round_trip_the_team_measured_replaces_the_models() -> None:
    from firsttoken.plan.simulate import routes_to

    plan = scenario(rate=1, duration=60)
    modelled = routes_to(plan, plan.options[0])  # Lagos and Nairobi to us-east-1, along the cables
    measured = plan.model_copy(update={"measured_rtts": [
        MeasuredRtt.model_validate({"between": ["aws:us-east-1", "lagos"], "rtt_ms": 190.0})]})  # either way round
    lagos, nairobi = routes_to(measured, measured.options[0])
    assert lagos.floor_ms == modelled[0].floor_ms  # the physics does not move
    assert lagos.floor_ms + lagos.distance_tax_ms == pytest.approx(190.0) and lagos.via == ()
    assert lagos.last_mile_ms == modelled[0].last_mile_ms  # the access network is still the city's
    assert nairobi == modelled[1]  # a pair nobody measured keeps the model's way
    with pytest.raises(ValueError, match="unknown place"):
        MeasuredRtt.model_validate({"between": ["lagos", "nowhere-at-all"], "rtt_ms": 1.0})
