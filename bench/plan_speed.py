"""How fast `firsttoken plan` runs: a day of traffic (about a million requests) for one option, by hand.

    .venv/bin/python bench/plan_speed.py [--hours 24] [--rate 11.6] [--replicas 2]

Prints the requests simulated, the engine steps taken, the wall time, and the same with skipping ahead
turned off over a shorter stretch (one step at a time, as the live region runs), for the ratio.
"""

from __future__ import annotations

import argparse
import time

from firsttoken.plan.scenario import Scenario
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--rate", type=float, default=11.6, help="requests a second (11.6: a million a day)")
    parser.add_argument("--replicas", type=int, default=2)
    args = parser.parse_args()
    requests, wall = timed(scenario(args.hours, args.rate, args.replicas), fast=True)
    print(f"{requests:,} requests over {args.hours:g} h: {wall:.1f} s ({requests / wall:,.0f} requests/s)")
    short = scenario(min(args.hours, 1.0), args.rate, args.replicas)
    (n, fast), (_, slow) = timed(short, True), timed(short, False)
    print(f"{n:,} requests: skipping ahead {fast:.1f} s, one step at a time {slow:.1f} s ({slow / fast:.1f}×)")


if __name__ == "__main__":
    main()
