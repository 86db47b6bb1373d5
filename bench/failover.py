"""Routing around failure and distance, through the gateway, against upstreams with known behaviour.

    .venv/bin/python bench/failover.py [--requests 200] [--concurrency 4]

1. **A failing target.** The alias's first target fails every request, in three ways in turn: HTTP 500s,
   connections dropped before an answer (resets), and 429s with Retry-After: 1. The second target is
   healthy. Half the requests stream, half do not. Reported: the share of client requests that got a
   whole answer (target: 100 %), and how many requests still went to the failing target (the breaker
   and the 429 cool-down should keep that small).
2. **A near and a far region.** Two upstreams serve the same model from `aws:af-south-1` (near Lagos,
   where the gateway is) and `aws:us-east-1`; their first tokens come after 30 ms and 150 ms. Reported:
   which target answered, in windows of 20 requests; after request 120 the near one degrades to 400 ms,
   and traffic should move to the far one.

The upstreams are bench/misbehaving_upstream.py. Run by hand; CI never runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gateway_overhead import WORK, firsttoken_process  # noqa: E402
from routing_client import counts, degrade, misbehaving_upstream, percentile, send  # noqa: E402

WINDOW = 20


def failing(port: int, bad: str, requests: int, concurrency: int) -> str:
    url = f"http://127.0.0.1:{port}/v1"
    extra = {"upstreams": {"up": {"url": url, "pool": {"warm": 8}}},
             "models": {"chat": [f"up/{bad}", "up/steady"]}, "journeys": {"log": None}}
    before = counts(port)
    with firsttoken_process(port, 1, None, extra) as (gateway, _):
        outcomes = asyncio.run(send(gateway, requests, concurrency, stream=None))
    after = counts(port)
    ok = sum(o.ok for o in outcomes)
    times = [o.ttft_s for o in outcomes if o.ok]
    return (f"| {bad} | {ok}/{len(outcomes)} ({ok / len(outcomes):.0%}) | {after.get(bad, 0) - before.get(bad, 0)} | "
            f"{statistics.median(times) * 1000:.0f} | {percentile(times, 99) * 1000:.0f} |")


def near_and_far(port: int, requests: int, concurrency: int) -> list[str]:
    url = f"http://127.0.0.1:{port}/v1"
    extra = {"location": "lagos",
             "upstreams": {"capetown": {"url": url, "region": "aws:af-south-1", "pool": {"warm": 4}},
                           "virginia": {"url": url, "region": "aws:us-east-1", "pool": {"warm": 4}}},
             "models": {"chat": ["virginia/far", "capetown/near"]}, "journeys": {"log": None},
             "routing": {"hedge": {"enabled": False}}}
    degrade(port, "near", 30)
    rows = []
    with firsttoken_process(port, 1, None, extra) as (gateway, _):
        first = asyncio.run(send(gateway, requests // 2 + requests // 10, concurrency))
        degrade(port, "near", 400)
        second = asyncio.run(send(gateway, requests - len(first), concurrency))
    degrade(port, "near", 30)
    outcomes = first + second
    for start in range(0, len(outcomes), WINDOW):
        window = outcomes[start:start + WINDOW]
        near = sum(o.route.startswith("capetown/") for o in window)
        note = " ← the near one degrades to 400 ms before this window" if start == len(first) else ""
        rows.append(f"| {start + 1}–{start + len(window)} | {near} | {len(window) - near} | "
                    f"{statistics.median(o.ttft_s for o in window) * 1000:.0f} |{note}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    with misbehaving_upstream() as port:
        failures = [failing(port, bad, args.requests, args.concurrency) for bad in ("fail-500", "reset", "limited")]
        windows = near_and_far(port, args.requests, args.concurrency)
    print(f"machine: {platform.node()} · {os.cpu_count()} cores · python {platform.python_version()} · "
          f"{args.requests} requests per scenario, {args.concurrency} at a time")
    print()
    print("| first target | client requests answered | requests to the failing target | p50 (ms) | p99 (ms) |")
    print("|---|---|---|---|---|")
    print("\n".join(failures))
    print()
    print("| requests | to the near region | to the far region | median TTFT (ms) |")
    print("|---|---|---|---|")
    print("\n".join(windows))


if __name__ == "__main__":
    main()
