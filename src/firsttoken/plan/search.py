"""`firsttoken plan --search`: the scenario's grid of self-hosted options, and the ones worth looking at:
the Pareto front of time to first token (p95, as the users feel it) against cost a month."""

from __future__ import annotations

import itertools

from pydantic import ValidationError

from firsttoken.plan.scenario import Option, Scenario, Search
from firsttoken.plan.summary import OptionSummary


def grid(search: Search) -> tuple[list[Option], list[str]]:
    """Every combination as an option, named by what varies; and why each one that cannot run was left out
    (a model that does not fit the GPUs, say)."""
    keys = list(search.vary)
    options, left_out = [], []
    for values in itertools.product(*(search.vary[key] for key in keys)):
        chosen = dict(zip(keys, values, strict=True))
        gateway = chosen.pop("gateway", None)
        name = ", ".join(("no gateway" if value is None else f"gateway {value}") if key == "gateway" else
                         f"{key} {value}" for key, value in zip(keys, values, strict=True))
        hosted = {**search.base, **chosen}
        if hosted.get("place") in search.usd_per_gpu_hour:
            hosted["usd_per_gpu_hour"] = search.usd_per_gpu_hour[hosted["place"]]
        try:
            options.append(Option.model_validate({
                "name": name, "self_hosted": hosted,
                "gateway": {"place": gateway} if gateway is not None else None}))
        except ValidationError as exc:
            left_out.append(f"{name}: {exc.errors()[0]['msg']}")
    return options, left_out


def with_grid(scenario: Scenario) -> tuple[Scenario, list[str]]:
    """The scenario with its grid's options after its own."""
    if scenario.search is None:
        return scenario, []
    options, left_out = grid(scenario.search)
    return scenario.model_copy(update={"options": [*scenario.options, *options]}), left_out


FASTER = 0.99  # paying more is worth showing only for a first token at least 1 % sooner at p95


def pareto(summaries: list[OptionSummary]) -> list[OptionSummary]:
    """The options no other beats on both p95 time to first token and cost a month, cheapest first: each
    one after the cheapest is at least 1 % faster than every cheaper one."""
    front: list[OptionSummary] = []
    for summary in sorted(summaries, key=lambda s: (s.usd_per_month, s.ttft.p95)):
        if not front or summary.ttft.p95 < front[-1].ttft.p95 * FASTER:
            front.append(summary)
    return front
