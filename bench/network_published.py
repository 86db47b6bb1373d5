"""The plan's network model (geo/paths.py: along the cables) against published round trips.

bench/data/published_rtts.csv holds measured round trips from four sources, chosen and documented
(bench/data/published_rtts.md) before this comparison. The model's three constants are fitted on one of
them, CloudPing's AWS medians (`--fit` fits them again); every other source's rows are held out. Each
row's error is the model's round trip over the published one, less one.

    .venv/bin/python bench/network_published.py [--fit]
"""

from __future__ import annotations

import argparse
import csv
import itertools
import statistics
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from firsttoken.geo import paths
from firsttoken.geo.places import resolve

ROWS = Path(__file__).parent / "data" / "published_rtts.csv"
FITTED_ON = "cloudping_aws"
TOLERANCE = 0.20
FLAT_FACTOR = 1.5  # one path factor for every way: the plan's model before the cables


@dataclass(frozen=True)
class Pair:
    source: str
    a: str
    b: str
    published_ms: float
    statistic: str
    way: paths.Path

    def error(self, *constants: float) -> float:
        return self.way.rtt_ms(*constants) / self.published_ms - 1


def pairs() -> list[Pair]:
    return [Pair(row["source_id"], row["from"], row["to"], float(row["rtt_ms"]), row["statistic"],
                 paths.path(resolve(row["from"]), resolve(row["to"])))
            for row in csv.DictReader(ROWS.open(encoding="utf-8"))]


def fit(calibration: list[Pair]) -> tuple[float, float, float]:
    """Slack, ms per link and ms at the ends that make the calibration rows' median error least."""
    grid = itertools.product([1.0 + i / 100 for i in range(61)], [i / 2 for i in range(13)], range(16))
    return min(grid, key=lambda c: statistics.median(abs(p.error(*c)) for p in calibration))


def within(rows: list[Pair]) -> str:
    errors = [abs(p.error()) for p in rows]
    inside = sum(e <= TOLERANCE for e in errors)
    return f"{inside} of {len(rows)} within {TOLERANCE:.0%}, median error {statistics.median(errors):.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="fit the constants again on the calibration rows")
    args = parser.parse_args()
    rows = pairs()
    calibration = [p for p in rows if p.source == FITTED_ON]
    held_out = [p for p in rows if p.source != FITTED_ON]
    console = Console()
    if args.fit:
        console.print(f"fitted on {FITTED_ON}: slack, ms per link, ms at the ends = {fit(calibration)} "
                      f"(in use: {paths.SLACK}, {paths.PER_LINK_MS}, {paths.ENDS_MS})")
    table = Table(title="round trips: published → along the cables")
    for column in ("source", "from", "to", "statistic", "published → model", "error", "via"):
        table.add_column(column)
    for p in rows:
        error = p.error()
        table.add_row(p.source + (" (fitted)" if p.source == FITTED_ON else ""), p.a, p.b, p.statistic,
                      f"{p.published_ms:.0f} → {p.way.rtt_ms():.0f} ms",
                      f"{error:+.0%}" + ("" if abs(error) <= TOLERANCE else " ✗"), " ".join(p.way.hubs))
    console.print(table)
    console.print(f"fitted on ({FITTED_ON}): {within(calibration)}")
    console.print(f"held out (every other source): {within(held_out)}")
    console.print(f"held out, medians and averages only: {within([p for p in held_out if p.statistic != 'p95'])}")
    flat = [abs(resolve(p.a).floor_ms(resolve(p.b)) * FLAT_FACTOR / p.published_ms - 1) for p in held_out]
    console.print(f"held out, the great circle × {FLAT_FACTOR} instead: {sum(e <= TOLERANCE for e in flat)} of "
                  f"{len(flat)} within {TOLERANCE:.0%}, median error {statistics.median(flat):.0%}")


if __name__ == "__main__":
    main()
