"""Does the simulated region keep its schedule under load? N concurrent streams against `firsttoken sim`
pinned to one core, with the region's own account of how late each event left.

    .venv/bin/python bench/sim_streams.py [--streams 1000] [--prompt-tokens 5000] [--max-tokens 500] [--json PATH]

The default is NIM's concurrency-100 row ten times over: Llama-3.3-70B FP8 on 2×H100, 10 replicas,
5 000-token prompts and 500-token answers, so about 100 streams per replica (some of them waiting for KV
cache, as there). The region runs on CPU 0 with `taskset`; this client runs on CPU 1, opens every stream
over --ramp-s (2 s) through aiohttp, reads each to the end, and checks every answer's token count. A stress setting
(`--prompt-tokens 10 --max-tokens 200`: 20 ms steps, 50 000 events a second) shows where one core ends. The
region measures, for each streamed event, the time it was written against the time the engine
scheduled it (GET /sim/stats), and for each engine step its release against its deadline.

Reported: events, event lateness p50/p99/p99.9/max, step lateness, the region's CPU use over the run,
and the client's own failures. A benchmark, run by hand; CI never runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any

import aiohttp

sys.path.insert(0, os.path.dirname(__file__))
from fixtures import free_port, wait_for  # noqa: E402


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def prompt(tokens: int, index: int) -> str:
    """About `tokens` tokens under the region's own tokenizer (a word each, plus four for the message)."""
    return f"stream {index} " + "word " * max(tokens - 6, 0)


async def one_stream(session: aiohttp.ClientSession, url: str, model: str, prompt_tokens: int, max_tokens: int,
                     index: int, start_after_s: float = 0.0) -> int:
    await asyncio.sleep(start_after_s)
    body = {"model": model, "max_tokens": max_tokens, "stream": True, "ignore_eos": True,  # every one max_tokens long
            "messages": [{"role": "user", "content": prompt(prompt_tokens, index)}]}
    tokens = 0
    async with session.post(url, json=body) as response:
        response.raise_for_status()
        async for line in response.content:
            if line.startswith(b"data: {") and b'"content":"' in line and b'"role"' not in line:
                tokens += 1
    return tokens


async def load(base: str, model: str, streams: int, prompt_tokens: int, max_tokens: int,
               ramp_s: float) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await one_stream(session, base + "/v1/chat/completions", model, 10, 4, -1)  # warm the imports and paths
        await session.delete(base + "/sim/stats")
        started = time.perf_counter()
        url = base + "/v1/chat/completions"
        results = await asyncio.gather(*(one_stream(session, url, model, prompt_tokens, max_tokens, i,
                                                    i * ramp_s / streams) for i in range(streams)),
                                       return_exceptions=True)
        elapsed = time.perf_counter() - started
        async with session.get(base + "/sim/stats") as response:
            stats = await response.json()
    failures = [r for r in results if isinstance(r, BaseException)]
    short = [r for r in results if not isinstance(r, BaseException) and r != max_tokens]
    return {"elapsed_s": elapsed, "failures": len(failures), "short_streams": len(short),
            "first_failure": repr(failures[0]) if failures else None, "stats": stats}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--prompt-tokens", type=int, default=5000)
    parser.add_argument("--max-tokens", type=int, default=500)
    parser.add_argument("--ramp-s", type=float, default=2.0,
                        help="open the streams evenly over this long, as load generators ramp (0: all at once)")
    parser.add_argument("--model", default="llama-3.3-70b")
    parser.add_argument("--sim-args", default="--gpu h100 --tp 2 --precision fp8 --replicas 10")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    port = free_port()
    sim = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-m", "firsttoken", "sim", "--port", str(port),
                            "--model", args.model, *args.sim_args.split()],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.sched_setaffinity(0, {1})
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(base + "/v1/models", 30)
        cpu_before, wall_before = cpu_seconds(sim.pid), time.perf_counter()
        result = asyncio.run(load(base, args.model, args.streams, args.prompt_tokens, args.max_tokens, args.ramp_s))
        result["sim_cpu_fraction"] = (cpu_seconds(sim.pid) - cpu_before) / (time.perf_counter() - wall_before)
    finally:
        sim.terminate()
        sim.wait(10)
    events = result["stats"]["events"]
    steps = [r["step_lateness"] for replicas in result["stats"]["replicas"].values() for r in replicas]
    worst_step = max(s["max_ms"] for s in steps)
    step_p99 = max(s["p99_ms"] for s in steps)
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"python {platform.python_version()}")
    print(f"sim: {args.model} {args.sim_args} on CPU 0; {args.streams} concurrent streams, {args.prompt_tokens} "
          f"tokens in and {args.max_tokens} out, opened over {args.ramp_s:g} s from CPU 1")
    print(f"  {events['events']} events in {result['elapsed_s']:.1f} s "
          f"({events['events'] / result['elapsed_s']:.0f}/s); region CPU {result['sim_cpu_fraction'] * 100:.0f} % "
          f"of one core")
    print(f"  event lateness ms: p50 {events['p50_ms']:.1f}, p99 {events['p99_ms']:.1f}, "
          f"p99.9 {events['p999_ms']:.1f}, max {events['max_ms']:.1f}")
    print(f"  step lateness ms (worst replica): p99 {step_p99:.1f}, max {worst_step:.1f}")
    print(f"  client: {result['failures']} failed, {result['short_streams']} short streams"
          + (f" (first: {result['first_failure']})" if result["first_failure"] else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), **result}, f, indent=2)


if __name__ == "__main__":
    main()
