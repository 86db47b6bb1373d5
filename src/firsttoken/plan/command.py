"""`firsttoken plan SCENARIO.yaml`: every option of a scenario under its users' traffic, compared."""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console
from rich.progress import Progress

from firsttoken.plan import report
from firsttoken.plan.compare import ClusterError, compare
from firsttoken.plan.render import show
from firsttoken.plan.scenario import ScenarioError, load
from firsttoken.plan.search import pareto, with_grid
from firsttoken.plan.summary import recommend

err = Console(stderr=True, highlight=False)


@click.command()
@click.argument("scenario_path", metavar="SCENARIO.yaml", type=click.Path(dir_okay=False))
@click.option("--duration", "duration_s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Virtual seconds of traffic (overrides the scenario's duration_s).")
@click.option("--json", "as_json", is_flag=True, help="The results as JSON on stdout.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Also write the report as one self-contained HTML page (map, charts, tables) here.")
@click.option("--processes", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Options simulated at once, each in a process of its own.")
@click.option("--cluster", metavar="ADDRESS", default=None,
              help="A Dask scheduler (tcp://host:8786) whose workers simulate the options instead of this machine.")
@click.option("--search", "searching", is_flag=True,
              help="Also run the scenario's search: grid, and show the Pareto front of TTFT p95 against cost.")
def plan(scenario_path: str, duration_s: float | None, as_json: bool, html_path: str | None, processes: int,
         cluster: str | None, searching: bool) -> None:
    """Which option should these users' requests go to? Each option runs the scenario's traffic through the
    simulated region's engine in virtual time; the table says what users in each city would feel, and
    what it would cost."""
    try:
        scenario = load(scenario_path)
    except ScenarioError as exc:
        err.print(f"firsttoken plan: {exc}", markup=False, soft_wrap=True)
        sys.exit(2)
    if duration_s is not None:
        scenario = scenario.model_copy(update={"duration_s": duration_s})
    left_out: list[str] = []
    if searching:
        if scenario.search is None:
            err.print(f"firsttoken plan: {scenario_path} has no search: grid to sweep", markup=False)
            sys.exit(2)
        scenario, left_out = with_grid(scenario)
    if cluster is not None and processes > 1:
        err.print("firsttoken plan: --cluster or --processes, not both (the cluster's workers are the processes)",
                  markup=False)
        sys.exit(2)
    with Progress(console=err, transient=True, disable=as_json) as progress:
        task = progress.add_task(f"simulating {len(scenario.options)} options", total=len(scenario.options))
        try:
            everything = compare(scenario, lambda name: progress.advance(task), processes, cluster)
        except ClusterError as exc:
            err.print(f"firsttoken plan: {exc}", markup=False, soft_wrap=True)
            sys.exit(2)
    summaries = everything
    if searching:  # what is shown and drawn: the front
        summaries = pareto(everything)
        names = {s.name for s in summaries}
        scenario = scenario.model_copy(update={"options": [o for o in scenario.options if o.name in names]})
        summaries = sorted(summaries, key=lambda s: [o.name for o in scenario.options].index(s.name))
    if html_path is not None:
        try:
            written = report.write(html_path, scenario, summaries)
        except OSError as exc:
            err.print(f"firsttoken plan: cannot write {html_path}: {exc.strerror or exc}", markup=False)
            sys.exit(2)
        err.print(f"report: {written.resolve().as_uri()}", markup=False)
    if as_json:
        answer = {"scenario": scenario.name, "options": [s.as_json() for s in everything],
                  "recommendation": recommend(summaries)}
        if searching:
            answer |= {"front": [s.name for s in summaries], "left_out": left_out}
        click.echo(json.dumps(answer, indent=2))
        return
    console = Console(highlight=False)
    if searching:
        console.print(f"{len(everything)} options simulated ({len(left_out)} left out: they cannot run); "
                      f"{len(summaries)} on the Pareto front of TTFT p95 against cost:")
        for reason in left_out:
            err.print(f"  left out: {reason}", markup=False)
    show(console, scenario, summaries)
