"""How fast `firsttoken plan` runs, by hand: a day of traffic (about a million requests) for one option, and
a search of a hundred options.

    .venv/bin/python bench/plan_speed.py [--hours 24] [--rate 11.6] [--replicas 2]
    .venv/bin/python bench/plan_speed.py --search [--hours 1] [--rate 4] [--processes 2] [--cluster]

Prints the requests simulated and the wall time, and for one option the same with skipping ahead turned
off over a shorter stretch (one step at a time, as the live region runs), for the ratio.
"""

from __future__ import annotations

import argparse
import time

from firsttoken.plan.compare import compare
from firsttoken.plan.scenario import Scenario, Search
from firsttoken.plan.search import pareto, with_grid
from firsttoken.plan.simulate import simulate


def scenario(hours: float, rate: float, replicas: int) -> Scenario:
    return Scenario.model_validate({
        "name": "speed", "seed": 1, "duration_s": hours * 3600,
        "users": {"rate_per_s": rate, "cities": [{"place": "lagos", "share": 1}]},
        "options": [{"name": "8B", "self_hosted": {"place": "aws:us-east-1", "gpu": "h100", "model": "llama-3.1-8b",
                                                   "replicas": replicas, "usd_per_gpu_hour": 4}}]})


def timed(plan: Scenario, fast: bool) -> tuple[int, float]:
    started = time.perf_counter()
    run = simulate(plan, plan.options[0], fast=fast)
    return len(run.journeys), time.perf_counter() - started


def grid_scenario(hours: float, rate: float) -> tuple[Scenario, list[str]]:
    """A hundred options: five places, two models, one to five replicas, with and without a gateway; and
    the combinations left out (none, as it stands)."""
    plan = scenario(hours, rate, 1).model_copy(update={"options": [], "search": Search.model_validate({
        "base": {"gpu": "h100", "usd_per_gpu_hour": 4},
        "vary": {"place": ["aws:us-east-1", "aws:eu-west-1", "aws:af-south-1", "aws:me-south-1", "lagos"],
                 "model": ["llama-3.1-8b", "qwen2.5-7b"], "replicas": [1, 2, 3, 4, 5], "gateway": [None, "lagos"]}})})
    return with_grid(plan)


def search(hours: float, rate: float, processes: int, on_cluster: bool) -> None:
    """The hundred options; with `on_cluster`, the same grid again on a local Dask cluster of as many
    worker processes."""
    plan, left_out = grid_scenario(hours, rate)
    started = time.perf_counter()
    summaries = compare(plan, processes=processes)
    wall = time.perf_counter() - started
    requests = sum(s.requests for s in summaries)
    print(f"{len(summaries)} options ({len(left_out)} left out), {requests:,} requests, {processes} processes: "
          f"{wall:.1f} s; {len(pareto(summaries))} on the front")
    if on_cluster:
        from distributed import LocalCluster

        with LocalCluster(n_workers=processes, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=None) as cluster:
            started = time.perf_counter()
            there = compare(plan, cluster=cluster.scheduler_address)
            on = time.perf_counter() - started
        same = "the same summaries" if there == summaries else "DIFFERENT summaries"
        print(f"the same grid on a local Dask cluster of {processes} worker processes: {on:.1f} s "
              f"({on / wall:.2f}× the processes' time), {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=None, help="of traffic (24 for one option, 1 for a search)")
    parser.add_argument("--rate", type=float, default=None, help="requests a second (11.6: a million a day)")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--search", action="store_true", help="a hundred options instead of one")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--cluster", action="store_true", help="with --search: the grid on a local Dask cluster too")
    args = parser.parse_args()
    if args.search:
        search(args.hours or 1.0, args.rate or 4.0, args.processes, args.cluster)
        return
    args.hours, args.rate = args.hours or 24.0, args.rate or 11.6
    requests, wall = timed(scenario(args.hours, args.rate, args.replicas), fast=True)
    print(f"{requests:,} requests over {args.hours:g} h: {wall:.1f} s ({requests / wall:,.0f} requests/s)")
    short = scenario(min(args.hours, 1.0), args.rate, args.replicas)
    (n, fast), (_, slow) = timed(short, True), timed(short, False)
    print(f"{n:,} requests: skipping ahead {fast:.1f} s, one step at a time {slow:.1f} s ({slow / fast:.1f}×)")


if __name__ == "__main__":
    main()
