"""A plan in the terminal: one row per option, the users' cities for each, where the first token's time
went, and the recommendation."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from firsttoken.plan.cells import COST_COLUMNS, FELT_COLUMNS, cost_cells, duration, felt_cells, price_notes
from firsttoken.plan.scenario import Scenario
from firsttoken.plan.summary import PHASES, OptionSummary, recommend


def show(console: Console, scenario: Scenario, summaries: list[OptionSummary]) -> None:
    users = scenario.users
    console.print(f"[bold]{scenario.name}[/]: {users.rate_per_s:g} requests/s for {scenario.duration_s:g} s "
                  f"(virtual), {scenario.workload.described}, {'streamed' if scenario.workload.stream else 'whole'}")
    ranked = sorted(summaries, key=lambda s: s.ttft.p95)
    felt = Table(title="What the users feel", title_justify="left")
    for column in ("option", *FELT_COLUMNS):
        felt.add_column(column, justify="left" if column in ("option", "where") else "right")
    for s in ranked:
        felt.add_row(s.name, *felt_cells(s))
    console.print(felt)

    notes = price_notes(summaries)
    cost = Table(title="What it costs", title_justify="left")
    for column in ("option", *COST_COLUMNS):
        cost.add_column(column, justify="left" if column in ("option", "prices") else "right")
    for s in ranked:
        cost.add_row(s.name, *cost_cells(s, notes))
    console.print(cost)
    for number, source in enumerate(notes, start=1):
        console.print(f"[dim][{number}] {escape(source)}[/]")

    cities = Table(title="TTFT p95 by city", title_justify="left")
    cities.add_column("city")
    for s in summaries:
        cities.add_column(s.name, justify="right")
    for i, city in enumerate(users.cities):
        cities.add_row(city.place, *(f"{duration(s.cities[i].ttft.p95)} (light {s.cities[i].floor_ms:.0f} ms)"
                                     for s in summaries))
    console.print(cities)

    # a phase to a row and an option to a column: ten phases do not fit across 80 columns, five options do;
    # a phase no option spends any time in is left out
    phases = Table(title="Where the first token's time goes (mean)", title_justify="left")
    phases.add_column("phase")
    for s in summaries:
        phases.add_column(s.name, justify="right")
    totals = [sum(s.phases.values()) or 1.0 for s in summaries]
    for phase in PHASES:
        if any(s.phases[phase] > 0 for s in summaries):
            phases.add_row(phase, *(f"{duration(s.phases[phase])} {s.phases[phase] / total:.0%}"
                                    for s, total in zip(summaries, totals, strict=True)))
    console.print(phases)
    for s in summaries:
        if s.connections_peak:
            console.print(f"[dim]{s.name}: its gateway needs {s.connections_peak} connections kept warm (pool.warm) "
                          "for the busiest moment's requests to pay no handshake across the ocean[/]")
    refused = [s for s in summaries if s.refused]
    for s in refused:
        console.print(f"[yellow]{s.name}: {s.refused} requests could never fit a replica's KV cache[/]")
    console.print(recommend(summaries))
