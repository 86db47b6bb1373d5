"""What an open dashboard costs the request path: the same gateway with no dashboard open, and with one
reading the live event stream as the page does (every journey up to 200 a second, a weighted sample past
it), in alternating rounds.

    .venv/bin/python bench/dashboard_cost.py [--rounds 6] [--seconds 5]

Each round starts a gateway afresh (1 worker, pinned to CPU 0) in front of the overhead benchmark's
static nginx upstream; wrk (32 connections) and the dashboard's reader share CPU 1, as a browser would be
elsewhere. It reports requests/s and gateway CPU per request (all its threads, from /proc) per variant,
the ratio of the medians, and how many requests the journeys that reached the reader stand for (the sum
of their weights) against how many were sent. A benchmark, run by hand.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import fixtures  # noqa: E402
import wrk  # noqa: E402
from gateway_overhead import WORK, firsttoken_process, nginx  # noqa: E402
from xray_cost import CLIENT_CPU, GATEWAY_CPU, cpu_seconds  # noqa: E402

ADMIN_KEY = "bench-dashboard-admin-key-0123456789"
# The page's reader, without the page: every event read and parsed, the journeys counted.
READER = """
import json, sys, httpx
import signal
journeys = 0.0  # the requests the journeys read stand for (past 200 a second, each sampled one carries a weight)
signal.signal(signal.SIGTERM, lambda *_: (print(round(journeys), flush=True), sys.exit(0)))
try:
    with httpx.stream("GET", sys.argv[1], headers={"Authorization": "Bearer " + sys.argv[2]}, timeout=None) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                data = json.loads(line[6:])
                if "request_id" in data:
                    journeys += data.get("weight", 1)
except httpx.HTTPError:
    pass
print(round(journeys), flush=True)
"""


@contextmanager
def dashboard_open(url: str) -> Iterator[subprocess.Popen[str]]:
    reader = subprocess.Popen(["taskset", "-c", CLIENT_CPU, sys.executable, "-c", READER,
                               f"{url}/dashboard/api/events", ADMIN_KEY], stdout=subprocess.PIPE, text=True)
    try:
        yield reader
    finally:
        reader.terminate()


def one_round(upstream: int, open_dashboard: bool, seconds: int) -> dict[str, tuple[float, float, int]]:
    """{mode: (requests/s, µs of gateway CPU per request, journeys the dashboard received)}."""
    out: dict[str, tuple[float, float, int]] = {}
    with firsttoken_process(upstream, 1, None, {"dashboard": {"admin_key": ADMIN_KEY}}) as (url, proc):
        subprocess.run(["taskset", "-a", "-p", "-c", GATEWAY_CPU, str(proc.pid)], check=True, capture_output=True)
        pin = ["taskset", "-c", CLIENT_CPU]
        for mode, model in (("json", "bench"), ("stream", "bench-sse")):
            body = fixtures.request_body(model, mode == "stream")
            wrk.run(f"{url}/v1/chat/completions", body, 32, 1, WORK, prefix=pin)  # warm-up
            with dashboard_open(url) if open_dashboard else _nothing() as reader:
                before = cpu_seconds(proc.pid)
                result = wrk.run(f"{url}/v1/chat/completions", body, 32, seconds, WORK, prefix=pin)
                used = cpu_seconds(proc.pid) - before
            received = int((reader.communicate(timeout=10)[0].split() or ["0"])[-1]) if reader else 0
            if result.errors:
                raise SystemExit(f"{mode}: {result.errors} errors; see {WORK}/firsttoken-1.log")
            out[mode] = (result.requests_per_s, used / (result.requests_per_s * seconds) * 1e6, received)
    return out


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=int, default=5)
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    variants = {"closed": False, "open": True}
    samples: dict[str, dict[str, list[tuple[float, float, int]]]] = {v: {"json": [], "stream": []} for v in variants}
    upstream = fixtures.free_port()
    with nginx(fixtures.upstream_nginx_conf(str(WORK), upstream), "upstream"):
        for index in range(args.rounds):
            order = list(variants) if index % 2 == 0 else list(reversed(variants))
            for name in order:
                for mode, sample in one_round(upstream, variants[name], args.seconds).items():
                    samples[name][mode].append(sample)
                    print(f"round {index + 1} dashboard {name:<6} {mode:<7} {sample[0]:8.0f} req/s "
                          f"{sample[1]:6.0f} µs CPU/request {sample[2]:7d} requests seen on the dashboard", flush=True)
    print()
    print(f"machine: {platform.node()} · {os.cpu_count()} cores · python {platform.python_version()} · "
          f"{args.rounds} rounds of {args.seconds} s, wrk c32")
    print()
    print("| mode | dashboard | req/s median (min–max) | µs CPU/request median (min–max) | seen ÷ sent |")
    print("|---|---|---|---|---|")
    for mode in ("json", "stream"):
        for name in variants:
            rates = [s[0] for s in samples[name][mode]]
            cpu = [s[1] for s in samples[name][mode]]
            read = (f"{statistics.median(s[2] / (s[0] * args.seconds) for s in samples[name][mode]):.2f}"
                    if variants[name] else "")
            print(f"| {mode} | {name} | {statistics.median(rates):.0f} ({min(rates):.0f}–{max(rates):.0f}) | "
                  f"{statistics.median(cpu):.0f} ({min(cpu):.0f}–{max(cpu):.0f}) | {read} |")
        closed, opened = samples["closed"][mode], samples["open"][mode]
        rate = statistics.median(s[0] for s in opened) / statistics.median(s[0] for s in closed)
        cpu = statistics.median(s[1] for s in opened) / statistics.median(s[1] for s in closed)
        print(f"| {mode} | open ÷ closed | {rate:.2f}× | {cpu:.2f}× | |")


if __name__ == "__main__":
    main()
