"""A long prompt across an ocean, through a gateway, with the host's initial TCP window as shipped (10
segments) and widened (`ip route change … initcwnd 64`): the round trips slow start costs, measured, against
what the plan says (plan/network.py's slow_start_round_trips). Needs root, `ip` and `ethtool`.

A region (`firsttoken sim`) beyond the packet-level delay line, a gateway beside the client (its cache off,
its pool warm), and streamed requests one at a time, each after a second's pause (long enough for Linux to
restart an idle connection's window: tcp_slow_start_after_idle), of prompts from 1 000 to 32 000 tokens of
four bytes each (a three-letter word and a space: English text's weight per token).

    sudo .venv/bin/python bench/slow_start.py [--rtt-ms 150] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import yaml
from fixtures import engine_ms

from firsttoken.lab.delayline import DelayLine
from firsttoken.plan.network import REQUEST_OVERHEAD_BYTES, slow_start_round_trips

SIM_PORT, GATEWAY_PORT = 9001, 8787
PROMPTS = (1000, 3000, 4000, 8000, 16000, 32000)
BYTES_PER_TOKEN = 4  # "wrd "

CLIENT = textwrap.dedent("""
    import json, sys, time, httpx
    base, prompts, repeats, tag = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    sent = []
    with httpx.Client(timeout=120) as client:
        for n in range(repeats + 1):  # the first round warms the processes up: not kept
            for prompt in prompts:
                time.sleep(1.0)
                # a first word of its own: no prefix of it is in the region's cache
                words = " ".join([f"r{tag}x{n}x{prompt}"] + ["wrd"] * (prompt - 5))
                body = {"model": "far/llama-3.1-8b", "stream": True, "max_tokens": 2, "ignore_eos": True,
                        "messages": [{"role": "user", "content": words}]}
                began, first = time.perf_counter(), None
                with client.stream("POST", base + "/v1/chat/completions", json=body) as response:
                    response.raise_for_status()
                    for line in response.iter_lines():
                        if first is None and '"content":"' in line and '"content":""' not in line:
                            first = time.perf_counter()
                sent.append({"prompt": prompt, "kept": n > 0, "ttft": (first - began) * 1000})
    print(json.dumps(sent))
""")


def measure(line: DelayLine, work: Path, window: int | None, repeats: int) -> dict[int, tuple[float, float]]:
    """By prompt length, the medians of TTFT and of TTFT less the region's own queue and prefill (ms), with
    the hosts' initial window `window` (None: as shipped)."""
    tag = str(window or "default")
    if window is not None:
        for ns in (line.client_ns, line.server_ns):
            line.initial_window(ns, window)
    config, log = work / f"firsttoken-{tag}.yaml", work / f"journeys-{tag}.db"
    config.write_text(yaml.safe_dump({"cache": False, "journeys": {"log": str(log)}, "upstreams": {"far": {
        "url": f"http://{line.server_ip}:{SIM_PORT}/v1", "pool": {"warm": 0, "keepalive_s": 0.5}}}}))
    gateway = line.run_in(line.client_ns, [sys.executable, "-m", "firsttoken", "serve", "--config", str(config),
                                           "--port", str(GATEWAY_PORT)],
                          stdout=subprocess.DEVNULL, stderr=(work / "gateway.log").open("w"))
    try:
        line.wait_for_port(line.client_ns, "127.0.0.1", GATEWAY_PORT)
        client = work / "client.py"
        client.write_text(CLIENT)
        result = line.run(line.client_ns, [sys.executable, str(client), f"http://127.0.0.1:{GATEWAY_PORT}",
                                           json.dumps(PROMPTS), str(repeats), tag], capture_output=True, text=True,
                          timeout=1200)
        if result.returncode != 0:
            raise RuntimeError(result.stderr)
    finally:
        gateway.terminate()
        gateway.wait(10)
    sent = json.loads(result.stdout)
    with sqlite3.connect(log) as db:  # one journey per request, in the order they were sent
        timings = [row[0] for row in db.execute("SELECT upstream_timing FROM journeys ORDER BY at")]
    assert len(timings) == len(sent), (len(timings), len(sent))
    by_prompt: dict[int, list[tuple[float, float]]] = {}
    for request, timing in zip(sent, timings, strict=True):
        if request["kept"]:
            by_prompt.setdefault(request["prompt"], []).append(
                (request["ttft"], request["ttft"] - engine_ms(timing)))
    return {prompt: (statistics.median(t for t, _ in rows), statistics.median(o for _, o in rows))
            for prompt, rows in by_prompt.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rtt-ms", type=float, default=150.0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="slow-start-"))
    with DelayLine(rtt_ms=args.rtt_ms) as line:
        line.run_in(line.server_ns, [sys.executable, "-m", "firsttoken", "sim", "--host", line.server_ip, "--port",
                                     str(SIM_PORT), "--model", "llama-3.1-8b", "--gpu", "h100"],
                    stdout=subprocess.DEVNULL, stderr=(work / "sim.log").open("w"))
        line.wait_for_port(line.client_ns, line.server_ip, SIM_PORT)
        shipped = measure(line, work, None, args.repeats)
        wide = measure(line, work, 64, args.repeats)
    print("| prompt tokens | request (KB) | round trips the plan adds, window 10 | TTFT, window 10 (ms) | "
          "TTFT, window 64 (ms) | outside the region's engine, window 10 (ms) | the same, window 64 (ms) | "
          "difference measured (ms) | difference planned (ms) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for prompt in PROMPTS:
        size = prompt * BYTES_PER_TOKEN + REQUEST_OVERHEAD_BYTES
        rounds = int(slow_start_round_trips(size))
        planned = (rounds - int(slow_start_round_trips(size, 64))) * args.rtt_ms
        (narrow_ttft, narrow_out), (wide_ttft, wide_out) = shipped[prompt], wide[prompt]
        print(f"| {prompt} | {size / 1024:.0f} | {rounds} | {narrow_ttft:.0f} | {wide_ttft:.0f} | {narrow_out:.0f} | "
              f"{wide_out:.0f} | {narrow_out - wide_out:.0f} | {planned:.0f} |")


if __name__ == "__main__":
    main()
