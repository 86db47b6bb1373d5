"""What spend accounting costs a request: the gateway's CPU time per request (read from /proc, so a busy
machine's waiting is not counted) and its throughput, with the spend ledger (the default), without it
(`spend: {log: null}`: costs still worked out and said, nothing written), and as it was at a git revision
before spend existed, in one run, round after round.

    .venv/bin/python bench/spend_cost.py --baseline d0c5548 [--seconds 4] [--rounds 3] [--concurrency 32]
                                        [--stream] [--hits]

The load is gateway_overhead's: one wrk connection pool against a static nginx upstream (1 worker), the
edge cache off (every request crosses to the upstream); with --hits, on, so that every request but the
first is an exact cache hit, the shortest path there is.
Run by hand; CI never runs it.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import fixtures  # noqa: E402
import gateway_overhead as overhead  # noqa: E402
import wrk  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int, task: int | None = None) -> float:
    """User and system CPU seconds of the process (every thread), or of one of its threads."""
    path = f"/proc/{pid}/task/{task}/stat" if task is not None else f"/proc/{pid}/stat"
    with open(path) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="a git revision before spend accounting")
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--hits", action="store_true", help="the edge cache on: all but the first request hits")
    args = parser.parse_args()
    cache = {"cache": {}} if args.hits else {}  # {}: the default cache
    variants: dict[str, tuple[Path | None, dict[str, Any] | None]] = {
        "ledger": (None, cache), "no ledger": (None, {**cache, "spend": {"log": None}}),
        f"before ({args.baseline})": (overhead.baseline_source(args.baseline), cache)}
    body = fixtures.request_body("bench-sse" if args.stream else "bench", args.stream)
    upstream = fixtures.free_port()
    print(f"{'variant':18s} {'req/s':>7s} {'CPU µs/request':>15s} {'event loop':>11s}")
    with ExitStack() as stack:
        stack.enter_context(overhead.nginx(fixtures.upstream_nginx_conf(str(overhead.WORK), upstream), "upstream"))
        for _ in range(args.rounds):
            for name, (source, extra) in variants.items():
                with overhead.firsttoken_process(upstream, 1, source, extra) as (url, proc):
                    target = url + "/v1/chat/completions"
                    wrk.run(target, body, args.concurrency, 1, overhead.WORK)  # warm: pools, caches, the answer kept
                    before, loop_before = cpu_s(proc.pid), cpu_s(proc.pid, proc.pid)
                    result = wrk.run(target, body, args.concurrency, args.seconds, overhead.WORK)
                    requests = result.requests_per_s * args.seconds
                    spent, loop_spent = cpu_s(proc.pid) - before, cpu_s(proc.pid, proc.pid) - loop_before
                    print(f"{name:18s} {result.requests_per_s:7.0f} {spent / requests * 1e6:15.1f} "
                          f"{loop_spent / requests * 1e6:11.1f}", flush=True)


if __name__ == "__main__":
    main()
