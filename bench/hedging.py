"""Hedging against a stalling target: p50, p99 and max time to first token through the gateway, with and
without hedging, and what the hedges cost in extra upstream requests, in one run.

    .venv/bin/python bench/hedging.py [--requests 300] [--concurrency 4]

The upstream (bench/stalling_upstream.py) serves `stalls`, whose first token comes after 50 ms except on
every tenth request, which waits 2 s, and `steady`, always after 60 ms. The alias lists `stalls` first and
is `ordered`, so that every request starts there (as when the first target is preferred for cost or
quality) and only hedging can help. Hedging waits for the first target's recent p90 first token (once it
has 20 measurements; 2 s before), within a budget of 10 % of requests. Run by hand; CI never runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
import urllib.request
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
import fixtures  # noqa: E402
from gateway_overhead import ROOT, WORK, firsttoken_process, process  # noqa: E402
from wrk import CLIENT_KEY  # noqa: E402


async def ttfts(url: str, requests: int, concurrency: int) -> list[float]:
    """Seconds to the first content chunk of each stream, `concurrency` at a time."""
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    results: list[float] = []
    queue = iter(range(requests))
    async with httpx.AsyncClient(base_url=url, timeout=30,
                                 headers={"authorization": f"Bearer {CLIENT_KEY}"}) as client:
        async def worker() -> None:
            for _ in queue:
                started = time.perf_counter()
                first = None
                async with client.stream("POST", "/v1/chat/completions", json=body) as reply:
                    async for line in reply.aiter_lines():
                        if first is None and line.startswith("data: {") and _content(line[6:]):
                            first = time.perf_counter() - started
                results.append(first if first is not None else float("nan"))
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


def _content(payload: str) -> str:
    choices = json.loads(payload).get("choices") or [{}]
    return (choices[0].get("delta") or {}).get("content") or ""


def counts(port: int) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/counts", timeout=5) as reply:
        return json.loads(reply.read())


def run(upstream: int, hedge: dict, requests: int, concurrency: int) -> tuple[list[float], dict[str, int]]:
    before = counts(upstream)
    extra = {"upstreams": {"up": {"url": f"http://127.0.0.1:{upstream}/v1", "pool": {"warm": 8}}},
             "models": {"chat": ["up/stalls", "up/steady"]},
             "routing": {"ordered": ["chat"], "hedge": hedge}, "journeys": {"log": None}}
    with firsttoken_process(upstream, 1, None, extra) as (url, _):
        times = asyncio.run(ttfts(url, requests, concurrency))
    after = counts(upstream)
    return times, {k: after.get(k, 0) - before.get(k, 0) for k in after}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered))) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    port = fixtures.free_port()
    argv = [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "bench" / "stalling_upstream.py"), str(port)]
    rows = []
    with process(argv, WORK / "stalling-upstream.log"):
        fixtures.wait_for(f"http://127.0.0.1:{port}/v1/models")
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
        print(f"| {label} | {statistics.median(times) * 1000:.0f} | {pct(times, 90) * 1000:.0f} | "
              f"{pct(times, 99) * 1000:.0f} | {max(times) * 1000:.0f} | {sent} | "
              f"{(sent - args.requests) / args.requests:.1%} | {cut} |")
    (_, plain, _, _), (_, hedged, _, _) = rows
    print()
    print(f"p99 with hedging ÷ without: {pct(hedged, 99) / pct(plain, 99):.3f}")


if __name__ == "__main__":
    main()
