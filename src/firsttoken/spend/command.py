"""`firsttoken spend`: what each key and model spent, what the edge saved them, and where each budget
stands, from the spend ledger of the gateway (its `spend.log`), in a table that reads at 80 columns."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from firsttoken import config as config_module
from firsttoken.config import ConfigError
from firsttoken.spend.report import GROUPINGS, spend_report

err = Console(stderr=True, highlight=False)


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="firsttoken.yaml whose spend.log and budgets to read (default: as `serve` finds its settings).")
@click.option("--log", "log_path", type=click.Path(dir_okay=False), default=None, help="The spend ledger file itself.")
@click.option("--key", default=None, help="Only this client key (its name in the config).")
@click.option("--since", default="30d", show_default=True,
              help="From the UTC day of: 30m, 6h, 7d, or a date (2026-12-01).")
@click.option("--by", type=click.Choice(["model", "key", "day"]), default=None,
              help="One row per model, key or day (default: per key and model).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def spend(config_path: str | None, log_path: str | None, key: str | None, since: str, by: str | None,
          as_json: bool) -> None:
    """Spend, savings and tokens per key and model, and each key's budget, from the spend ledger."""
    from firsttoken import last_serve
    from firsttoken.journey.summary import parse_since

    try:
        settings = config_module.load(config_path)
        start = parse_since(since)
    except (ConfigError, ValueError) as exc:
        err.print(f"firsttoken spend: {exc}", markup=False, soft_wrap=True)
        sys.exit(2)
    path = last_serve.locate("spend", log_path or settings.spend.log, log_path is not None or config_path is not None)
    if not path or not os.path.isfile(path):
        err.print(f"firsttoken spend: no spend ledger at {os.path.abspath(path) if path else 'all'}; the gateway "
                  f"keeps one where its spend.log says (default firsttoken-spend.db in the directory where "
                  f"`firsttoken serve` runs); name it with --log.", markup=False, soft_wrap=True)
        sys.exit(2)
    report = spend_report(path, start, by or "key,model", key, settings.keys)
    if as_json:
        click.echo(json.dumps({"ledger": os.path.abspath(path), **report}, indent=2))
        return
    print_report(report, os.path.abspath(path), Console(highlight=False))


def print_report(report: dict[str, Any], path: str, console: Console) -> None:
    grouping = GROUPINGS[report["by"]]
    names = ["model" if c == "route" else c for c in grouping]
    console.print(f"Spend from {report['since']} to {report['until']} (UTC days)"
                  + (f", key {report['key']}" if report["key"] else "") + f"\nledger: {path}")
    # One space between columns: with rich's two, a key and a model name as short as sim/llama-3.1-8b folded.
    table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0), header_style="bold")
    for name in names:
        table.add_column(name, overflow="fold", max_width=28)
    for name in ("requests", "tokens in/out", "spent", "saved", "saved time"):
        table.add_column(name, justify="right", no_wrap=True)
    for row in [*report["rows"], None, {**report["total"], **{n: "" for n in names}, names[0]: "total"}]:
        if row is None:
            table.add_section()
            continue
        table.add_row(*(str(row[n]) for n in names), f"{row['requests']:,}",
                      f"{_count(row['tokens']['input'])} / {_count(row['tokens']['output'])}",
                      _usd(row["usd"], row["unpriced_requests"]), _usd(row["saved"]["usd"], 0),
                      _seconds(row["saved"]["seconds"]))
    console.print(table)
    total = report["total"]
    saved = total["saved"]
    notes = [f"saved by the edge: {saved['cache_hits']:,} cache hits, {saved['joined']:,} joined requests, "
             f"{saved['sized']:,} sized down; {_count(saved['tokens'])} tokens not sent upstream"]
    if total["estimated_requests"]:
        notes.append(f"{total['estimated_requests']:,} requests had no usage from their upstream: their tokens are "
                     f"the gateway's estimate")
    if total["unpriced_requests"]:
        notes.append(f"{total['unpriced_requests']:,} requests went to routes with no price (*): give them one "
                     f"under spend.prices")
    for note in notes:
        console.print(note)
    for budget in report["budgets"]:
        limits = [f"${budget['usd_per_day']:g} a day" if budget["usd_per_day"] is not None else "",
                  f"${budget['usd_per_month']:g} a month" if budget["usd_per_month"] is not None else ""]
        verdict = "[bold red]PAST ITS BUDGET[/]" if budget["past_budget"] else "within budget"
        dearest = budget["dearest_day"]
        console.print(f"budget {budget['key']}: {' and '.join(x for x in limits if x)}; today "
                      f"${budget['today']:.4f}, this month ${budget['this_month']:.4f}"
                      + (f", dearest day {dearest['day']} ${dearest['usd']:.4f}" if dearest else "")
                      + f": {verdict}")


def _usd(value: float, unpriced: int) -> str:
    text = f"${value:,.2f}" if value >= 100 else f"${value:.4f}"
    return text + ("*" if unpriced else "")


def _count(tokens: int) -> str:
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if tokens >= size:
            return f"{tokens / size:.1f}{unit}"
    return str(tokens)


def _seconds(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"
