"""What the journey X-ray costs the gateway: this code against a revision from before it, in alternating
rounds on one machine, so that the machine's own drift falls on both alike.

    .venv/bin/python bench/xray_cost.py [--baseline 6f5a7db] [--rounds 6] [--seconds 5]

Each round starts each gateway afresh (1 worker, pinned to CPU 0; wrk on CPU 1), warms it for a second,
then runs wrk at 32 connections for `--seconds` on the non-streaming and the streaming path. It reports,
per variant, the median requests/s and gateway CPU per request (all its threads, from /proc) with the
spread across rounds, and the ratio of the medians. A benchmark, run by hand; CI never runs it.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import fixtures  # noqa: E402
import wrk  # noqa: E402
from gateway_overhead import WORK, baseline_source, firsttoken_process, nginx  # noqa: E402

GATEWAY_CPU, CLIENT_CPU = "0", "1"


def cpu_seconds(pid: int) -> float:
    """User + system time of a process and all its threads so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(upstream: int, variant: tuple[Path | None, dict], seconds: int) -> dict[str, tuple[float, float]]:
    """{mode: (requests/s, µs of gateway CPU per request)} for one fresh gateway."""
    out: dict[str, tuple[float, float]] = {}
    source, extra = variant
    with firsttoken_process(upstream, 1, source, extra) as (url, proc):
        subprocess.run(["taskset", "-a", "-p", "-c", GATEWAY_CPU, str(proc.pid)], check=True, capture_output=True)
        pin = ["taskset", "-c", CLIENT_CPU]
        for mode, model in (("json", "bench"), ("stream", "bench-sse")):
            body = fixtures.request_body(model, mode == "stream")
            wrk.run(f"{url}/v1/chat/completions", body, 32, 1, WORK, prefix=pin)  # warm-up
            before = cpu_seconds(proc.pid)
            result = wrk.run(f"{url}/v1/chat/completions", body, 32, seconds, WORK, prefix=pin)
            used = cpu_seconds(proc.pid) - before
            if result.errors:
                raise SystemExit(f"{mode}: {result.errors} errors; see {WORK}/firsttoken-1.log")
            out[mode] = (result.requests_per_s, used / (result.requests_per_s * seconds) * 1e6)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="6f5a7db", help="the revision to compare against")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=int, default=5)
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    log = str(WORK / "xray-journeys.db")
    variants: dict[str, tuple[Path | None, dict]] = {
        "baseline": (baseline_source(args.baseline), {}),
        "this code": (None, {"journeys": {"log": log}}),
        "no log": (None, {"journeys": {"log": None}}),  # this code with the SQLite journey log off
    }
    samples: dict[str, dict[str, list[tuple[float, float]]]] = {v: {"json": [], "stream": []} for v in variants}
    upstream = fixtures.free_port()
    with ExitStack() as stack:
        stack.enter_context(nginx(fixtures.upstream_nginx_conf(str(WORK), upstream), "upstream"))
        for index in range(args.rounds):
            order = list(variants) if index % 2 == 0 else list(reversed(variants))  # ABC CBA: no order bias
            for name in order:
                for mode, sample in one_round(upstream, variants[name], args.seconds).items():
                    samples[name][mode].append(sample)
                    print(f"round {index + 1} {name:<10} {mode:<7} {sample[0]:8.0f} req/s "
                          f"{sample[1]:6.0f} µs CPU/request", flush=True)
    print()
    print(f"machine: {platform.node()} · {os.cpu_count()} cores · python {platform.python_version()} · "
          f"baseline {args.baseline} · {args.rounds} rounds of {args.seconds} s, wrk c32")
    print()
    print("| mode | variant | req/s median (min–max) | µs CPU/request median (min–max) |")
    print("|---|---|---|---|")
    for mode in ("json", "stream"):
        for name in variants:
            rates = [s[0] for s in samples[name][mode]]
            cpu = [s[1] for s in samples[name][mode]]
            print(f"| {mode} | {name} | {statistics.median(rates):.0f} ({min(rates):.0f}–{max(rates):.0f}) | "
                  f"{statistics.median(cpu):.0f} ({min(cpu):.0f}–{max(cpu):.0f}) |")
        base = statistics.median(s[0] for s in samples["baseline"][mode])
        base_cpu = statistics.median(s[1] for s in samples["baseline"][mode])
        for name in list(variants)[1:]:
            ours = statistics.median(s[0] for s in samples[name][mode])
            ours_cpu = statistics.median(s[1] for s in samples[name][mode])
            print(f"| {mode} | {name} ÷ baseline | {ours / base:.2f}× | {ours_cpu / base_cpu:.2f}× |")


if __name__ == "__main__":
    main()
