"""Prices and energy in the plan: an option without a price takes the shipped table's and says so, one the
table does not know is refused with what it does know, a stated price wins; energy follows the GPUs'
board power, their busy share and the facility's PUE, and electricity bought apart is paid for."""

from __future__ import annotations

import csv
from importlib import resources

import pytest

from firsttoken.plan.energy import IDLE_SHARE, gpu_kwh
from firsttoken.plan.scenario import DEFAULT_PUE, Scenario
from firsttoken.plan.simulate import simulate
from firsttoken.plan.summary import HOURS_PER_MONTH, summarise
from firsttoken.prices import shipped as prices
from firsttoken.sim.catalogue import Catalogue

USERS = {"rate_per_s": 1, "cities": [{"place": "lagos", "share": 1}]}


def plan(*options: dict) -> Scenario:
    return Scenario.model_validate({"name": "prices", "seed": 2, "duration_s": 300, "users": USERS,
                                    "options": list(options)})


def test_every_shipped_row_has_its_source_and_a_date() -> None:
    for table in ("gpu_hour.csv", "api_prices.csv"):
        with resources.files("firsttoken.prices").joinpath("tables", table).open(encoding="utf-8") as rows:
            for row in csv.DictReader(rows):
                assert row["source"].strip() and row["date"][:2] == "20", row  # an ISO date, not "unknown"
    catalogue = Catalogue.builtin()
    assert {row.gpu for row in prices.gpu_hours()} <= set(catalogue.gpus)


def test_an_option_without_a_price_takes_the_tables_and_cites_it() -> None:
    scenario = plan({"name": "hosted", "self_hosted": {"place": "aws:us-east-1", "gpu": "h100"}},
                    {"name": "api", "api": {"place": "aws:us-east-1", "model": "gpt-4o-mini", "ttft_ms": 400,
                                            "itl_ms": 10}})
    hosted, api = scenario.options[0].self_hosted, scenario.options[1].api
    assert hosted.usd_per_gpu_hour == prices.gpu_hour("h100", "aws:us-east-1").usd == 55.04 / 8
    assert "AWS Price List" in hosted.price_source and "2026-07-28" in hosted.price_source
    assert (api.usd_per_million_input, api.usd_per_million_output) == (0.15, 0.6)
    summaries = [summarise(scenario, simulate(scenario, option)) for option in scenario.options]
    assert [s.price_source for s in summaries] == [hosted.price_source, api.price_source]


def test_a_stated_price_wins_and_cites_nothing() -> None:
    scenario = plan({"name": "hosted", "self_hosted": {"place": "aws:us-east-1", "usd_per_gpu_hour": 2.5}})
    assert scenario.options[0].self_hosted.usd_per_gpu_hour == 2.5
    assert scenario.options[0].self_hosted.price_source is None


@pytest.mark.parametrize("option, says", [
    ({"self_hosted": {"place": "aws:af-south-1", "gpu": "h100"}},
     "no shipped GPU-hour price for h100 at aws:af-south-1 .*h100 at aws:us-east-1.*give usd_per_gpu_hour"),
    ({"self_hosted": {"place": "lagos"}}, "no shipped GPU-hour price for h100 at Lagos, NG"),
    ({"api": {"place": "aws:us-east-1", "model": "house-model", "ttft_ms": 300, "itl_ms": 9}},
     "no shipped price for 'house-model' .*gpt-4o-mini.*give usd_per_million_input"),
])
def test_a_price_the_table_lacks_is_refused_with_what_it_has(option: dict, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        plan({"name": "x", **option})


def test_energy_is_the_boards_power_while_busy_a_tenth_while_waiting_times_the_pue() -> None:
    assert gpu_kwh(700, 2, busy_s=3600, loaded_s=7200, pue=1.5) == pytest.approx(
        0.7 * 2 * (1 + IDLE_SHARE) * 1.5)
    scenario = plan({"name": "grid", "self_hosted": {"place": "aws:us-east-1", "tp": 2}},
                    {"name": "diesel", "self_hosted": {"place": "lagos", "tp": 2, "usd_per_gpu_hour": 5.0,
                                                       "power": {"usd_per_kwh": 0.4, "source": "diesel",
                                                                 "pue": 1.6}}})
    grid, diesel = (summarise(scenario, run) for run in (simulate(scenario, o) for o in scenario.options))
    assert grid.usd_power_per_month is None and grid.kwh_per_million_tokens is not None
    assert diesel.power_source == "diesel"
    # the same requests, the same GPUs: energy differs by the PUE alone, and the power bill is in the total
    assert diesel.kwh_per_million_tokens / grid.kwh_per_million_tokens == pytest.approx(1.6 / DEFAULT_PUE, rel=0.02)
    gpu_hours = 5.0 * 2 * HOURS_PER_MONTH
    assert diesel.usd_per_month == pytest.approx(gpu_hours + diesel.usd_power_per_month)
    assert diesel.usd_power_per_month == pytest.approx(
        diesel.kwh_per_million_tokens * 0.4 * diesel.usd_per_month / diesel.usd_per_million_tokens)


def test_an_api_has_no_energy_figure() -> None:
    scenario = plan({"name": "api", "api": {"place": "aws:us-east-1", "model": "gpt-4o-mini", "ttft_ms": 400,
                                            "itl_ms": 10}})
    summary = summarise(scenario, simulate(scenario, scenario.options[0]))
    assert summary.kwh_per_million_tokens is None and summary.usd_power_per_month is None
