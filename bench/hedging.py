"""Hedging against a stalling target: p50, p99 and max time to first token through the gateway, with and
without hedging, and what the hedges cost in extra upstream requests, in one run.

    .venv/bin/python bench/hedging.py [--requests 300] [--concurrency 4]

The upstream (bench/misbehaving_upstream.py) serves `stalls`, whose first token comes after 50 ms except on
every tenth request, which waits 2 s, and `steady`, always after 60 ms. The alias lists `stalls` first and
is `ordered`, so that every request starts there (as when the first target is preferred for cost or
quality) and only hedging can help. Hedging waits for the first target's recent p90 first token (once it
has 20 measurements; 2 s before), within a budget of 10 % of requests. Run by hand; CI never runs it.
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
from routing_client import counts, misbehaving_upstream, percentile, send  # noqa: E402


def run(upstream: int, hedge: dict, requests: int, concurrency: int) -> tuple[list[float], dict[str, int]]:
    before = counts(upstream)
    extra = {"upstreams": {"up": {"url": f"http://127.0.0.1:{upstream}/v1", "pool": {"warm": 8}}},
             "models": {"chat": ["up/stalls", "up/steady"]},
             "routing": {"ordered": ["chat"], "hedge": hedge}, "journeys": {"log": None}}
    with firsttoken_process(upstream, 1, None, extra) as (url, _):
        outcomes = asyncio.run(send(url, requests, concurrency))
    assert all(o.ok for o in outcomes)
    after = counts(upstream)
    return [o.ttft_s for o in outcomes], {k: after.get(k, 0) - before.get(k, 0) for k in after}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    rows = []
    with misbehaving_upstream() as port:
        for label, hedge in (("no hedging", {"enabled": False}),
                             ("hedging (p90, budget 10 %)", {"percentile": 90, "budget": 0.10})):
            times, upstream = run(port, hedge, args.requests, args.concurrency)
            sent = upstream.get("stalls", 0) + upstream.get("steady", 0)
            rows.append((label, times, upstream, sent))
    print(f"machine: {platform.node()} · {os.cpu_count()} cores · python {platform.python_version()} · "
          f"{args.requests} streams, {args.concurrency} at a time")
    print()
    print("| gateway | p50 TTFT (ms) | p90 (ms) | p99 (ms) | max (ms) | upstream requests | extra | cut off |")
    print("|---|---|---|---|---|---|---|---|")
    for label, times, upstream, sent in rows:
        cut = upstream.get("stalls cut off", 0) + upstream.get("steady cut off", 0)
        print(f"| {label} | {statistics.median(times) * 1000:.0f} | {percentile(times, 90) * 1000:.0f} | "
              f"{percentile(times, 99) * 1000:.0f} | {max(times) * 1000:.0f} | {sent} | "
              f"{(sent - args.requests) / args.requests:.1%} | {cut} |")
    (_, plain, _, _), (_, hedged, _, _) = rows
    print()
    print(f"p99 with hedging ÷ without: {percentile(hedged, 99) / percentile(plain, 99):.3f}")


if __name__ == "__main__":
    main()
