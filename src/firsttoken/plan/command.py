"""`firsttoken plan SCENARIO.yaml`: every option of a scenario under its users' traffic, compared."""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console
from rich.progress import Progress

from firsttoken.plan import report
from firsttoken.plan.compare import compare
from firsttoken.plan.render import show
from firsttoken.plan.scenario import ScenarioError, load
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
def plan(scenario_path: str, duration_s: float | None, as_json: bool, html_path: str | None, processes: int) -> None:
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
    with Progress(console=err, transient=True, disable=as_json) as progress:
        task = progress.add_task(f"simulating {len(scenario.options)} options", total=len(scenario.options))
        summaries = compare(scenario, lambda name: progress.advance(task), processes)
    if html_path is not None:
        try:
            written = report.write(html_path, scenario, summaries)
        except OSError as exc:
            err.print(f"firsttoken plan: cannot write {html_path}: {exc.strerror or exc}", markup=False)
            sys.exit(2)
        err.print(f"report: {written.resolve().as_uri()}", markup=False)
    if as_json:
        click.echo(json.dumps({"scenario": scenario.name, "options": [s.as_json() for s in summaries],
                               "recommendation": recommend(summaries)}, indent=2))
        return
    show(Console(highlight=False), scenario, summaries)
