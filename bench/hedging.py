"""Hedging against a stalling target: p50, p99 and max time to first token through the gateway, with and
without hedging, and what the hedges cost in extra upstream requests, in one run.

    .venv/bin/python bench/hedging.py [--requests 300] [--concurrency 4]

Two simulated regions (`firsttoken sim` processes) serve llama-3.1-8b to a gateway in Lagos, from Ireland
and from London (the sims add each direction's fibre delay). Ireland stalls one first token in ten by 2 s
(`--stall 0.1:2`: a GPU queue, a preemption); London is steady. The alias lists Ireland first and is
`ordered`, so that every request starts there (as when the first target is preferred for cost or
quality) and only hedging can help. Hedging waits for the first target's recent p90 first token (capped
at 3× its median), within a budget of 10 % of requests. Run by hand; CI never runs it.
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
from routing_client import MODEL, Region, percentile, region, send  # noqa: E402

Counts = dict[str, dict[str, int]]


def run(stalls: Region, steady: Region, hedge: dict, requests: int, concurrency: int) -> tuple[list[float], Counts]:
    stalls.faults(seed=0)  # the same stalls for each run
    before = {r.name: r.requests() for r in (stalls, steady)}
    extra = {"location": "lagos",
             "upstreams": {r.name: {"url": r.url, "region": where, "pool": {"warm": 8}}
                           for r, where in ((stalls, "aws:eu-west-1"), (steady, "aws:eu-west-2"))},
             "models": {"chat": [f"{stalls.name}/{MODEL}", f"{steady.name}/{MODEL}"]},
             "routing": {"ordered": ["chat"], "hedge": hedge}, "journeys": {"log": None}}
    with firsttoken_process(stalls.port, 1, None, extra) as (url, _):
        outcomes = asyncio.run(send(url, requests, concurrency))
    assert all(o.ok for o in outcomes)
    after = {r.name: r.requests() for r in (stalls, steady)}
    return [o.ttft_s for o in outcomes], {name: {k: after[name].get(k, 0) - before[name].get(k, 0)
                                                  for k in after[name]} for name in after}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    rows = []
    with region("ireland", "--region", "aws:eu-west-1", "--client-location", "lagos", "--stall", "0.1:2") as stalls, \
            region("london", "--region", "aws:eu-west-2", "--client-location", "lagos") as steady:
        for label, hedge in (("no hedging", {"enabled": False}),
                             ("hedging (p90, budget 10 %)", {"percentile": 90, "budget": 0.10})):
            times, upstream = run(stalls, steady, hedge, args.requests, args.concurrency)
            sent = sum(counted.get("received", 0) for counted in upstream.values())
            rows.append((label, times, upstream, sent))
    print(f"machine: {platform.node()} · {os.cpu_count()} cores · python {platform.python_version()} · "
          f"{args.requests} streams, {args.concurrency} at a time")
    print()
    print("| gateway | p50 TTFT (ms) | p90 (ms) | p99 (ms) | max (ms) | upstream requests | extra | cut off |")
    print("|---|---|---|---|---|---|---|---|")
    for label, times, upstream, sent in rows:
        cut = sum(counted.get("abandoned", 0) for counted in upstream.values())
        print(f"| {label} | {statistics.median(times) * 1000:.0f} | {percentile(times, 90) * 1000:.0f} | "
              f"{percentile(times, 99) * 1000:.0f} | {max(times) * 1000:.0f} | {sent} | "
              f"{(sent - args.requests) / args.requests:.1%} | {cut} |")
    (_, plain, _, _), (_, hedged, _, _) = rows
    print()
    print(f"p99 with hedging ÷ without: {percentile(hedged, 99) / percentile(plain, 99):.3f}")


if __name__ == "__main__":
    main()
