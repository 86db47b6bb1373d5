"""`firsttoken plan` against the live simulated region, by hand: the plan's own requests, sent at their moments
through a real gateway to a real region across the packet-level delay line (firsttoken.lab.replay), for
a few scenarios; prints planned against live TTFT and E2E, p50 and p95, and the gap. Needs root, `ip` and
`ethtool` (the delay line). Run by hand; CI runs a shorter one (tests/plan/test_plan_live.py).

    sudo .venv/bin/python bench/plan_live.py [--seconds 120]
"""

from __future__ import annotations

import argparse

import numpy as np

from firsttoken.lab.replay import LIVE_BYTES_PER_TOKEN, replay
from firsttoken.plan.scenario import Scenario

# (the users' city, the workload, requests a second): one option, an 8B model on an H100 in us-east-1, behind
# a gateway in the users' city (its cache off, as the replay's).
# The gateway's host opens TCP's initial window to 64 segments (`ip route … initcwnd 64`), as recommended
# (docs/deploy.md): a long prompt crosses in one round trip; what slow start costs without it is measured
# apart (bench/slow_start.py).
GATEWAY_WINDOW = 64
CASES = [("nairobi", "chat", 1.5), ("lagos", "chat", 1.5), ("nairobi", "rag", 1.0), ("nairobi", "chat", 6.0)]


def scenario(city: str, preset: str, rate: float, seconds: float) -> Scenario:
    return Scenario.model_validate({
        "name": f"{city} {preset} {rate:g}/s", "seed": 11, "duration_s": seconds, "path_factor": 1.5,
        "users": {"rate_per_s": rate, "last_mile_ms": 0, "reuse": 1.0, "cities": [{"place": city, "share": 1}]},
        "workload": {"preset": preset, "stream": True, "bytes_per_token": LIVE_BYTES_PER_TOKEN},
        "options": [{"name": "us-east-1", "self_hosted": {"place": "aws:us-east-1", "gpu": "h100",
                                                          "model": "llama-3.1-8b", "usd_per_gpu_hour": 4},
                     "gateway": {"place": city, "cache": False, "initial_window": GATEWAY_WINDOW}}]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="of traffic per case")
    seconds = parser.parse_args().seconds
    print("| users | workload | rate | requests | measure | planned | live | gap |")
    print("|---|---|---|---|---|---|---|---|")
    for city, preset, rate in CASES:
        planned, live = replay(scenario(city, preset, rate, seconds))
        for measure in ("ttft", "e2e"):
            for p in (50, 95):
                a, b = (float(np.percentile(getattr(f, measure), p)) * 1000 for f in (planned, live))
                print(f"| {city} | {preset} | {rate:g}/s | {len(live.ttft)} | {measure.upper()} p{p} | {a:.0f} ms | "
                      f"{b:.0f} ms | {b / a - 1:+.1%} |", flush=True)


if __name__ == "__main__":
    main()
