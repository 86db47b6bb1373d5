"""Routing around failure and distance, through the gateway, against simulated regions with known faults.

    .venv/bin/python bench/failover.py [--requests 200] [--concurrency 4]

1. **A failing target.** The alias's first target is a `firsttoken sim` that fails in one of five ways:
   every request answered with HTTP 500 (`--fail 1:500`) or 503, every connection dropped before an
   answer (`--fail 1:reset`), rate limited to 60 requests a minute per key (`--rpm 60`: 429s with
   Retry-After), or killed (SIGKILL) after a quarter of the requests. The second target is a healthy sim.
   Half the requests stream, half do not. Reported: the share of client requests that got a whole answer
   (target: 100 %), and how many requests still reached the failing target (its own count; the breaker
   and the 429 cool-down should keep that small).
2. **A near and a far region.** Two sims serve the same model from `aws:af-south-1` (Cape Town) and
   `aws:us-east-1` (Virginia) to a gateway in Lagos; each adds its fibre delay both ways. Reported: which
   answered, in windows of 20 requests. After 60 % of the requests, Cape Town's queue grows by 400 ms
   (`POST /sim/faults {"queue_ms": 400}`) and traffic should move to Virginia. Then Cape Town heals, and
   traffic should come back: reported per 5 s for 90 s.

Run by hand; CI never runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gateway_overhead import WORK, firsttoken_process  # noqa: E402
from routing_client import MODEL, Outcome, Region, percentile, region, send  # noqa: E402

WINDOW = 20
FAILURES = {"HTTP 500": ("--fail", "1:500"), "HTTP 503": ("--fail", "1:503"), "reset": ("--fail", "1:reset"),
            "429 (60 rpm)": ("--rpm", "60"), "killed": ()}


def failing(healthy: Region, how: str, requests: int, concurrency: int) -> str:
    with region("bad", *FAILURES[how]) as bad:
        extra = {"upstreams": {name: {"url": r.url, "pool": {"warm": 8}} for name, r in (("bad", bad),
                                                                                         ("good", healthy))},
                 "models": {"chat": [f"bad/{MODEL}", f"good/{MODEL}"]}, "routing": {"ordered": ["chat"]},
                 "journeys": {"log": None}}
        with firsttoken_process(bad.port, 1, None, extra) as (gateway, _):
            if how == "killed":
                outcomes = asyncio.run(send(gateway, requests // 4, concurrency, stream=None))
                reached = bad.requests().get("received", 0)
                bad.process.kill()
                outcomes += asyncio.run(send(gateway, requests - len(outcomes), concurrency, stream=None))
                reached_text = f"{reached} before it died"
            else:
                outcomes = asyncio.run(send(gateway, requests, concurrency, stream=None))
                counted = bad.requests()
                reached_text = f"{counted.get('received', 0)} ({counted.get('answered', 0)} answered there)"
    ok = sum(o.ok for o in outcomes)
    times = [o.ttft_s for o in outcomes if o.ok]
    return (f"| {how} | {ok}/{len(outcomes)} ({ok / len(outcomes):.0%}) | {reached_text} | "
            f"{statistics.median(times) * 1000:.0f} | {percentile(times, 99) * 1000:.0f} |")


def near_and_far(requests: int, concurrency: int) -> tuple[list[str], list[str]]:
    with region("capetown", "--region", "aws:af-south-1", "--client-location", "lagos") as near, \
            region("virginia", "--region", "aws:us-east-1", "--client-location", "lagos") as far:
        extra = {"location": "lagos",
                 "upstreams": {"capetown": {"url": near.url, "region": "aws:af-south-1", "pool": {"warm": 4}},
                               "virginia": {"url": far.url, "region": "aws:us-east-1", "pool": {"warm": 4}}},
                 "models": {"chat": [f"virginia/{MODEL}", f"capetown/{MODEL}"]}, "journeys": {"log": None},
                 "routing": {"hedge": {"enabled": False}}}
        with firsttoken_process(near.port, 1, None, extra) as (gateway, _):
            first = asyncio.run(send(gateway, requests * 3 // 5, concurrency))
            near.faults(queue_ms=400)
            second = asyncio.run(send(gateway, requests - len(first), concurrency))
            near.faults(queue_ms=0)
            back = coming_back(gateway, concurrency)
    return windows(first, second), back


def coming_back(gateway: str, concurrency: int, seconds: float = 90.0) -> list[str]:
    """After Cape Town heals: per 5 s of traffic, how much of it went back there."""
    rows, started = [], time.monotonic()
    while time.monotonic() - started < seconds:
        window_start = time.monotonic()
        outcomes: list[Outcome] = []
        while time.monotonic() - window_start < 5.0:
            outcomes += asyncio.run(send(gateway, concurrency * 4, concurrency))
        near = sum(o.route.startswith("capetown/") for o in outcomes)
        rows.append(f"| {window_start - started:.0f}–{time.monotonic() - started:.0f} s | {near} | "
                    f"{len(outcomes) - near} | {statistics.median(o.ttft_s for o in outcomes) * 1000:.0f} |")
    return rows


def windows(first: list[Outcome], second: list[Outcome]) -> list[str]:
    rows = []
    outcomes = first + second
    for start in range(0, len(outcomes), WINDOW):
        window = outcomes[start:start + WINDOW]
        near = sum(o.route.startswith("capetown/") for o in window)
        note = " ← Cape Town's queue grows by 400 ms before this window" if start == len(first) else ""
        rows.append(f"| {start + 1}–{start + len(window)} | {near} | {len(window) - near} | "
                    f"{statistics.median(o.ttft_s for o in window) * 1000:.0f} |{note}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    with region("good") as healthy:
        failures = [failing(healthy, how, args.requests, args.concurrency) for how in FAILURES]
    rows, back = near_and_far(args.requests, args.concurrency)
    print(f"machine: {platform.node()} · {os.cpu_count()} cores · python {platform.python_version()} · "
          f"{args.requests} requests per scenario, {args.concurrency} at a time")
    print()
    print("| the first target | client requests answered | requests that reached it | p50 (ms) | p99 (ms) |")
    print("|---|---|---|---|---|")
    print("\n".join(failures))
    print()
    print("| requests | to Cape Town (near) | to Virginia (far) | median TTFT (ms) |")
    print("|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("| after Cape Town heals | to Cape Town (near) | to Virginia (far) | median TTFT (ms) |")
    print("|---|---|---|---|")
    print("\n".join(back))


if __name__ == "__main__":
    main()
