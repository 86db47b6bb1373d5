"""A workload of several kinds of request, and task sizing at the gateway: the kinds it sizes down go to a
smaller model (another option of the scenario) and only those; they cost what that option costs, and the
rest never see it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from firsttoken.cli import main
from firsttoken.plan.scenario import Scenario
from firsttoken.plan.simulate import simulate
from firsttoken.plan.summary import HOURS_PER_MONTH, summarise

BIG = {"place": "aws:us-east-1", "gpu": "h100", "model": "llama-3.3-70b", "precision": "fp8", "tp": 2,
       "usd_per_gpu_hour": 5.0}
SMALL_API = {"place": "aws:af-south-1", "model": "small", "ttft_ms": 100, "itl_ms": 5,
             "usd_per_million_input": 0.1, "usd_per_million_output": 0.4}
SMALL_HOSTED = {"place": "lagos", "gpu": "h100", "model": "llama-3.1-8b", "usd_per_gpu_hour": 7.0}


def plan(small: dict, kind: str = "api", sizing: dict | None = None, **workload: object) -> Scenario:
    gateway = {"place": "lagos", "sizing": sizing or {"to": "small", "kinds": ["classification"]}}
    return Scenario.model_validate({
        "name": "sizing", "seed": 4, "duration_s": 600,
        "users": {"rate_per_s": 2, "reuse": 1, "cities": [{"place": "lagos", "share": 1}]},
        "workload": {"mix": {"chat": 0.6, "classification": 0.4}, "repeats": 0.1, **workload},
        "options": [{"name": "big", "self_hosted": BIG, "gateway": gateway},
                    {"name": "big alone", "self_hosted": BIG},
                    {"name": "small", kind: small}]})


def test_a_mix_draws_each_kind_by_its_share_with_its_own_lengths() -> None:
    scenario = plan(SMALL_API)
    journeys = simulate(scenario, scenario.options[1]).journeys
    kinds = [j.kind for j in journeys]
    assert kinds.count("classification") / len(kinds) == pytest.approx(0.4, abs=0.04)
    prompts = {kind: np.median([j.prompt for j in journeys if j.kind == kind]) for kind in ("chat", "classification")}
    assert prompts["chat"] == pytest.approx(800, rel=0.15) and prompts["classification"] == pytest.approx(300, rel=0.15)
    assert max(j.prefix for j in journeys if j.kind == "classification") == 160  # its labelling instructions
    assert {j.prefix for j in journeys if j.kind == "chat"} == {0}
    assert scenario.workload.described == "chat 60%, classification 40%"


def test_the_gateway_sends_the_sized_kinds_and_only_those_to_the_smaller_api_and_pays_its_prices() -> None:
    scenario = plan(SMALL_API)
    big, small = scenario.options[0], scenario.options[2]
    run = simulate(scenario, big)
    way = scenario.way(big.gateway.where, small.where, 0.0)
    upstream = [j for j in run.journeys if not j.from_cache]
    sized = [j for j in upstream if j.sized]
    assert sized == [j for j in upstream if j.kind == "classification"]
    assert all(j.far == way for j in sized)
    assert all(j.far != way and j.admitted > j.arrived for j in upstream if not j.sized)  # the big deployment's
    at_small = [j.first_token - j.arrived for j in sized]
    assert np.median(at_small) == pytest.approx(0.1, rel=0.1)  # the small API's published pace
    assert all(j.front_end_s == 0 for j in sized)  # an API's own time is in its published TTFT
    summary = summarise(scenario, run)
    assert summary.sized_share == pytest.approx(len(sized) / len(upstream))
    tokens = sum(j.prompt * 0.1 + j.answer * 0.4 for j in sized) / 1e6
    gpus = 5.0 * 2 * run.served.loaded_s / run.served.until * HOURS_PER_MONTH
    assert summary.usd_per_month == pytest.approx(gpus + tokens * HOURS_PER_MONTH * 3600 / 600)


def test_a_smaller_deployment_answers_on_its_own_engine_and_its_gpu_hours_are_billed() -> None:
    scenario = plan(SMALL_HOSTED, kind="self_hosted")
    run = simulate(scenario, scenario.options[0])
    sized = [j for j in run.journeys if j.sized]
    assert sized and run.sized is not None and run.sized.busy_s > 0
    assert run.sized.loaded_s == pytest.approx(run.sized.until)  # one replica, loaded throughout
    front = scenario.options[2].self_hosted.front_end
    assert all(j.front_end_s == pytest.approx(front.seconds(j.prompt)) for j in sized)
    alone = summarise(scenario, simulate(scenario, scenario.options[1]))
    summary = summarise(scenario, run)
    small_month = 7.0 * run.sized.loaded_s / run.sized.until * HOURS_PER_MONTH
    big_month = 5.0 * 2 * run.served.loaded_s / run.served.until * HOURS_PER_MONTH
    assert summary.usd_per_month == pytest.approx(big_month + small_month)
    # the big deployment, spared the classification, is busy less of the time; both deployments' GPUs
    # draw energy, so the tokens cost more of it than the big one's alone
    assert summary.gpu_utilisation < alone.gpu_utilisation
    assert summary.kwh_per_million_tokens > alone.kwh_per_million_tokens


@pytest.mark.parametrize(("sizing", "workload", "message"), [
    ({"to": "nowhere", "kinds": ["classification"]}, {}, "sizing.to 'nowhere' names no other option"),
    ({"to": "big", "kinds": ["classification"]}, {}, "sizing.to 'big' names no other option"),
    ({"to": "small", "kinds": ["agent"]}, {}, "sizing.kinds agent: not in the workload"),
])
def test_sizing_that_cannot_be_is_refused_with_its_key(sizing: dict | None, workload: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan(SMALL_API, sizing=sizing, **workload)


def test_a_mix_with_a_file_of_lengths_is_refused(tmp_path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("prompt_tokens,output_tokens\n100,20\n")
    with pytest.raises(ValueError, match="mix: and lengths: together"):
        plan(SMALL_API, lengths=str(trace))


def test_the_shipped_sizing_example_runs_and_sizes_half_its_requests_down() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "lagos-sizing.yaml"
    answer = CliRunner().invoke(main, ["plan", str(example), "--duration", "120", "--json"])
    assert answer.exit_code == 0, answer.output
    options = {o["name"]: o for o in json.loads(answer.output)["options"]}
    sized = options["70B in us-east-1, gateway in Lagos sizing labels to the 8B"]
    assert sized["sized_share"] == pytest.approx(0.5, abs=0.1)
    unsized = options["70B in us-east-1, gateway in Lagos"]
    assert unsized["sized_share"] == 0
    assert sized["ttft"]["p50"] < unsized["ttft"]["p50"]  # the labels are answered next door
    assert sized["usd_per_month"] > unsized["usd_per_month"]  # and the 8B there is paid for
