"""The plan's users over a day: each city's rate follows the shape on its own clock, bursts raise it for
their length, a flat day is the plain Poisson process it always was, prompt and answer lengths can come
from a file of them, and a gateway's caches answer what was asked before, in the same words or others."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from firsttoken.geo.places import resolve
from firsttoken.geo.timezones import utc_offset_h, zone_of
from firsttoken.plan.arrivals import SHAPES
from firsttoken.plan.scenario import Scenario, ScenarioError, load
from firsttoken.plan.simulate import routes_to, simulate, traffic
from firsttoken.plan.summary import summarise

HOSTED = {"place": "aws:eu-west-1", "gpu": "h100", "model": "llama-3.1-8b", "usd_per_gpu_hour": 4.0}
HOUR = 3600


def scenario(users: dict, duration: float, **rest: object) -> Scenario:
    return Scenario.model_validate({"name": "t", "seed": 5, "duration_s": duration, "users": users,
                                    "options": [{"name": "hosted", "self_hosted": HOSTED}]} | rest)


def sent_and_cities(plan: Scenario) -> tuple[np.ndarray, np.ndarray]:
    journeys = traffic(plan, routes_to(plan, plan.options[0]))
    return np.array([j.sent for j in journeys]), np.array([j.city for j in journeys])


def test_each_place_keeps_its_own_clock() -> None:
    winter, summer = datetime(2026, 1, 15, tzinfo=UTC), datetime(2026, 7, 15, tzinfo=UTC)
    assert utc_offset_h(resolve("lagos"), winter) == 1  # solar time there is UTC+0.2: the zone is what counts
    assert utc_offset_h(resolve("accra"), winter) == 0
    assert utc_offset_h(resolve("nairobi"), winter) == 3
    assert utc_offset_h(resolve("new york"), winter) == -5
    assert utc_offset_h(resolve("new york"), summer) == -4
    assert utc_offset_h(resolve("los angeles"), winter) == -8  # the nearest of the country's own zones
    assert utc_offset_h(resolve("kolkata"), winter) == 5.5
    assert str(zone_of(resolve("aws:us-east-1"))) == "America/New_York"  # a region: the nearest zone of all


def test_a_day_of_traffic_follows_the_shape_on_the_citys_clock() -> None:
    plan = scenario({"rate_per_s": 2, "over_the_day": "working-day", "cities": [{"place": "lagos", "share": 1}]},
                    duration=24 * HOUR)
    sent, _ = sent_and_cities(plan)
    assert len(sent) == pytest.approx(2 * 24 * HOUR, rel=0.02)  # the rate is the day's mean
    per_utc_hour = np.bincount((sent // HOUR).astype(int), minlength=24)
    shape = np.array(SHAPES["working-day"]) / np.mean(SHAPES["working-day"])
    # Lagos is UTC+1: its 10 am is 9 UTC. Interpolated between hourly values, each hour's count is within
    # a tenth of the shape's around it (a busy hour holds about 15 000 requests, so sampling noise is ~1 %).
    for utc_hour in (2, 9, 14, 20):
        local = (utc_hour + 1) % 24
        expected = 2 * HOUR * shape[local]
        assert per_utc_hour[utc_hour] == pytest.approx(expected, rel=0.1), (utc_hour, per_utc_hour)
    assert per_utc_hour[9] > 15 * per_utc_hour[2]


def test_cities_peak_at_their_own_evening() -> None:
    cities = [{"place": "lagos", "share": 1}, {"place": "nairobi", "share": 1}]
    plan = scenario({"rate_per_s": 2, "over_the_day": "evening", "cities": cities}, duration=24 * HOUR)
    sent, city = sent_and_cities(plan)
    peaks = [int(np.argmax(np.bincount((sent[city == c] // HOUR).astype(int), minlength=24))) for c in (0, 1)]
    evening_peak = int(np.argmax(SHAPES["evening"]))  # 9 pm local
    assert peaks == [evening_peak - 1, evening_peak - 3]  # Lagos UTC+1, Nairobi UTC+3


def test_the_start_sets_where_a_short_run_falls_in_the_day() -> None:
    users = {"rate_per_s": 2, "over_the_day": "working-day", "cities": [{"place": "lagos", "share": 1}]}
    night = scenario(users, duration=1800, start="2026-03-02T02:00:00Z")
    noon = scenario(users, duration=1800, start="2026-03-02T13:00:00+02:00")  # 11:00 UTC, noon in Lagos
    assert len(sent_and_cities(noon)[0]) > 10 * len(sent_and_cities(night)[0])


def test_bursts_raise_the_rate_for_their_length() -> None:
    base = {"rate_per_s": 2, "cities": [{"place": "lagos", "share": 1}]}
    quiet = sent_and_cities(scenario(base, duration=6 * HOUR))[0]
    bursty = sent_and_cities(scenario({**base, "bursts": {"every_s": 600, "length_s": 60, "factor": 5}},
                                      duration=6 * HOUR))[0]
    # Bursts start at random, one every 600 s on average, so a time lies in one with probability
    # 1 - exp(-60/600) = 9.5 %, at five times the rate: 1 + 4 × 0.095 = 1.38 times the requests in all.
    assert len(bursty) / len(quiet) == pytest.approx(1.38, abs=0.12)
    per_minute = np.bincount((bursty // 60).astype(int))
    assert per_minute.max() > 3.5 * 120  # a burst's minute, against 120 a minute usually
    assert np.median(per_minute) == pytest.approx(120, rel=0.1)


def test_bursts_queue_a_deployment_that_copes_on_average() -> None:
    base = {"rate_per_s": 3, "cities": [{"place": "lagos", "share": 1}]}
    quiet = scenario(base, duration=1200)
    bursty = scenario({**base, "bursts": {"every_s": 300, "length_s": 60, "factor": 6}}, duration=1200)
    felt = [summarise(plan, simulate(plan, plan.options[0])) for plan in (quiet, bursty)]
    assert felt[1].ttft.p95 > 1.5 * felt[0].ttft.p95
    assert felt[1].phases["queue"] > 2 * felt[0].phases["queue"]


def test_a_flat_day_is_the_plain_poisson_process() -> None:
    # Scenarios written before days had shapes draw exactly the traffic they did
    plan = scenario({"rate_per_s": 4, "cities": [{"place": "lagos", "share": 3}, {"place": "accra", "share": 1}]},
                    duration=900)
    sent, city = sent_and_cities(plan)
    rng = np.random.default_rng(plan.seed)
    expected = 4 * 900
    plain = np.cumsum(rng.exponential(1 / 4, int(expected + 10 * np.sqrt(expected) + 10)))
    plain = plain[plain < 900]
    assert np.array_equal(sent, plain)
    assert np.array_equal(city, rng.choice(2, size=len(plain), p=[0.75, 0.25]))


@pytest.mark.parametrize("shape, says", [([1.0] * 23, "24 hourly values"), ([0.0] * 24, "some above 0"),
                                         ("weekend", "over_the_day")])
def test_a_bad_day_is_refused_with_its_key(shape: object, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        scenario({"rate_per_s": 1, "over_the_day": shape, "cities": [{"place": "lagos", "share": 1}]}, 60)


def write_scenario(folder: Path, lengths: str) -> Path:
    path = folder / "plan.yaml"
    path.write_text(f"""
name: lengths from a trace
duration_s: 600
users: {{rate_per_s: 1, cities: [{{place: lagos, share: 1}}]}}
workload: {{preset: rag, lengths: {lengths}}}
options: [{{name: hosted, self_hosted: {{place: "aws:eu-west-1", usd_per_gpu_hour: 4}}}}]
""")
    return path


def test_prompts_and_answers_are_drawn_from_a_file_of_lengths(tmp_path: Path) -> None:
    # the Azure LLM inference trace's own column names, in a folder beside the scenario
    (tmp_path / "traces").mkdir()
    rows = [(120, 7), (4000, 300), (900, 45)]
    (tmp_path / "traces" / "azure.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"2023-11-16,{p},{a}\n" for p, a in rows))
    plan = load(write_scenario(tmp_path, "traces/azure.csv"))
    journeys = traffic(plan, routes_to(plan, plan.options[0]))
    drawn = {(j.prompt, j.answer) for j in journeys}
    assert drawn == set(rows)  # each request is one row, whole; 600 draws find all three


def test_a_file_of_prompts_alone_keeps_the_presets_answers(tmp_path: Path) -> None:
    (tmp_path / "prompts.csv").write_text("prompt_tokens\n" + "".join(f"{n}\n" for n in (50, 60, 70)))
    plan = load(write_scenario(tmp_path, "prompts.csv"))
    journeys = traffic(plan, routes_to(plan, plan.options[0]))
    assert {j.prompt for j in journeys} == {50, 60, 70}
    assert len({j.answer for j in journeys}) > 20  # the chat answers' distribution


@pytest.mark.parametrize("content, says", [
    ("tokens\n5\n", "no prompt column; the header needs one of prompt_tokens"),
    ("prompt_tokens,output_tokens\n5,2\nfive,2\n", "line 3: lengths are whole numbers"),
    ("prompt_tokens\n", "no rows under the header"),
    ("prompt_tokens\n0\n", "at least 1 token"),
])
def test_a_bad_lengths_file_is_refused_with_its_key_and_line(tmp_path: Path, content: str, says: str) -> None:
    (tmp_path / "bad.csv").write_text(content)
    with pytest.raises(ScenarioError, match=f"workload.lengths: .*bad.csv.*{says}"):
        load(write_scenario(tmp_path, "bad.csv"))


def test_a_missing_lengths_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="workload.lengths: .*absent.csv: No such file"):
        load(write_scenario(tmp_path, "absent.csv"))


def test_a_gateways_semantic_cache_answers_most_paraphrases_and_no_miss_waits_for_its_look() -> None:
    from firsttoken.plan.serving import GATEWAY, stack
    from firsttoken.plan.simulate import CACHE_HIT_S, SEMANTIC_SERVED, semantic_hit_s

    users = {"rate_per_s": 3, "reuse": 1, "cities": [{"place": "lagos", "share": 1}]}
    gated = {"name": "gated", "self_hosted": HOSTED, "gateway": {"place": "lagos"}}
    plan = scenario(users, duration=600, workload={"repeats": 0.1, "paraphrases": 0.3}, options=[gated])
    journeys = simulate(plan, plan.options[0]).journeys
    paraphrases = [j for j in journeys if j.paraphrase]
    assert not any(j.repeat for j in paraphrases)
    assert len(paraphrases) / len(journeys) == pytest.approx(0.3 * 0.9, abs=0.03)  # of those not repeats
    recalled = [j for j in paraphrases if j.recalled]
    assert len(recalled) / len(paraphrases) == pytest.approx(SEMANTIC_SERVED, abs=0.04)
    for journey in journeys:
        there = journey.sent + journey.one_way_s + journey.slow_start_s
        if journey.repeat:  # found in the same words first: no embedding
            assert journey.first_token == pytest.approx(there + CACHE_HIT_S) and journey.gateway_s == 0
        elif journey.recalled:  # found in other words: the lookup, by the prompt's length, is the answer's time
            hit = semantic_hit_s(journey.prompt)
            assert journey.first_token == pytest.approx(there + hit) and journey.far is None
            assert semantic_hit_s(10) <= hit <= semantic_hit_s(10_000)
        else:  # not found, sent on at once (the look races it): the gateway's forwarding alone
            forwarding = stack(GATEWAY).seconds(journey.prompt)
            assert journey.arrived == pytest.approx(there + forwarding) and journey.far is not None
    # without a gateway nothing is cached: the same requests all reach the option
    direct = plan.model_copy(update={"options": [plan.options[0].model_copy(update={"gateway": None})]})
    assert not any(j.from_cache or j.gateway_s for j in simulate(direct, direct.options[0]).journeys)


def test_the_shares_asked_before_add_up_to_less_than_one() -> None:
    users = {"rate_per_s": 1, "cities": [{"place": "lagos", "share": 1}]}
    with pytest.raises(ValueError, match="repeats \\+ paraphrases"):
        scenario(users, 60, workload={"repeats": 0.6, "paraphrases": 0.5})
