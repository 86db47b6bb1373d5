"""The plan's engine against published serving measurements it was not calibrated on.

The rows are bench/data/published_serving.csv, chosen and documented (bench/data/published_serving.md)
before this comparison was first run. Each row's deployment runs in virtual time under the row's own load:
a closed loop of N users with fixed lengths, or Poisson arrivals at the row's rate through the planner
itself (a user beside the GPUs: no network), with lengths drawn as the source's benchmark drew them.
Rows whose lengths the source does not state are shown apart: nothing can be compared without them.

    .venv/bin/python bench/plan_published.py
"""

from __future__ import annotations

import csv
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from firsttoken.plan.scenario import Scenario
from firsttoken.plan.simulate import simulate
from firsttoken.sim.catalogue import Catalogue
from firsttoken.sim.closed_loop import closed_loop
from firsttoken.sim.engine import Engine
from firsttoken.sim.roofline import Deployment

ROWS = Path(__file__).parent / "data" / "published_serving.csv"
TOLERANCE = 0.15
# sglang's bench_serving `--dataset-name random --random-range-ratio 0`: each length uniform in [1, the
# given length]; the datacrunch runs gave 1024 for both (bench/data/published_serving.md)
UNIFORM_UP_TO = 1024


@dataclass(frozen=True)
class Measured:
    ttft_ms: float
    itl_ms: float


def deployment(row: dict[str, str]) -> Deployment:
    catalogue = Catalogue.builtin()
    return Deployment(catalogue.gpu(row["gpu"]), catalogue.model(row["model"]), row["precision"], int(row["tp"]))


def closed(row: dict[str, str], completed: int = 40) -> Measured:
    """N users, each sending the next request as the last one ends; the first N are warm-up."""
    measured = closed_loop(Engine(deployment(row)), int(row["concurrency"]), int(row["input_tokens"]),
                           int(row["output_tokens"]), completed)
    return Measured(statistics.median((s.first_token_at - s.arrived_at) * 1000 for s in measured),
                    statistics.median((s.finished_at - s.first_token_at) / (s.max_output - 1) * 1000
                                      for s in measured if s.max_output > 1))


def poisson(row: dict[str, str], requests: int = 1200, seed: int = 1) -> Measured:
    """Poisson arrivals at the row's rate, through the planner, lengths uniform as the benchmark drew them."""
    rate = float(row["concurrency"].removeprefix("rate=").removesuffix("/s"))
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as folder:
        lengths = Path(folder) / "lengths.csv"
        drawn = rng.integers(1, UNIFORM_UP_TO + 1, (5000, 2))
        lengths.write_text("prompt_tokens,output_tokens\n" + "".join(f"{p},{o}\n" for p, o in drawn))
        place = "aws:us-east-1"
        scenario = Scenario.model_validate({
            "name": row["source_id"], "seed": seed, "duration_s": requests / rate,
            "users": {"rate_per_s": rate, "last_mile_ms": 0, "reuse": 1, "cities": [{"place": place, "share": 1}]},
            "workload": {"lengths": str(lengths), "stream": True},
            "options": [{"name": "row", "self_hosted": {
                "place": place, "gpu": row["gpu"], "model": row["model"], "precision": row["precision"],
                "tp": int(row["tp"]), "usd_per_gpu_hour": 1,
                # the engine alone: these stacks' own time per request is not known (docs/benchmarks.md)
                "stack": "none"}}]})
        run = simulate(scenario, scenario.options[0])
    journeys = [j for j in run.journeys if not j.refused]
    return Measured(statistics.median((j.first_token - j.arrived) * 1000 for j in journeys),
                    statistics.median((j.finished - j.first_token) / (j.answer - 1) * 1000
                                      for j in journeys if j.answer > 1))


def main() -> None:
    rows = list(csv.DictReader(ROWS.open()))
    table = Table(title="the plan's engine against published serving measurements (held out)")
    for column in ("source", "deployment", "load", "lengths", "TTFT published → plan", "ITL published → plan"):
        table.add_column(column)
    for row in rows:
        setup = f"{row['model']} {row['precision']} TP{row['tp']} on {row['gpus']}×{row['gpu']}"
        if not row["input_tokens"]:
            table.add_row(row["source_id"], setup, row["concurrency"], "not stated", "not comparable", "")
            continue
        load_is_rate = row["concurrency"].startswith("rate=")
        measured = poisson(row) if load_is_rate else closed(row)
        lengths = f"uniform 1–{UNIFORM_UP_TO}" if load_is_rate else f"{row['input_tokens']}/{row['output_tokens']}"
        published = Measured(float(row["ttft_ms"]), float(row["itl_ms"]))
        table.add_row(row["source_id"], setup, row["concurrency"], lengths,
                      _versus(published.ttft_ms, measured.ttft_ms), _versus(published.itl_ms, measured.itl_ms))
    Console().print(table)


def _versus(published: float, planned: float) -> str:
    error = planned / published - 1
    mark = "" if abs(error) <= TOLERANCE else "  ✗"
    return f"{published:.1f} → {planned:.1f} ms ({error:+.0%}){mark}"


if __name__ == "__main__":
    main()
