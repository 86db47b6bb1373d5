"""What the journey X-ray costs the gateway, in instructions per request: this code against a revision
from before it, counted by valgrind (callgrind), which neither a noisy neighbour nor CPU frequency moves.

    .venv/bin/python bench/xray_instructions.py [--baseline 6f5a7db] [--requests 2000]

Each variant's gateway (1 worker, in front of the static nginx upstream) starts under callgrind with
instrumentation off; once it is ready, instrumentation goes on and `--requests` requests are sent (8 at a time,
keep-alive) to warm it, then as many again between zeroing callgrind's counters and dumping them. The
instructions of that second batch, all the gateway's threads together, divided by its requests, is the
figure: start-up, warm-up and shutdown fall outside it. Run by hand; CI never runs it. Needs valgrind.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).parent))
import fixtures  # noqa: E402
from gateway_overhead import ROOT, WORK, baseline_source, nginx, process  # noqa: E402
from wrk import CLIENT_KEY  # noqa: E402

CONCURRENCY = 8


async def send(url: str, body: str, count: int) -> None:
    """`count` requests, CONCURRENCY at a time on kept-alive connections; every one must succeed."""
    headers = {"authorization": f"Bearer {CLIENT_KEY}", "content-type": "application/json"}
    remaining = iter(range(count))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY)) as session:
        async def worker() -> None:
            for _ in remaining:
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    assert response.status == 200, response.status

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


def counted(pid: int, send_batch) -> int:
    """Instructions the process (all threads) executes while `send_batch()` runs: callgrind's counters
    zeroed before, dumped after."""
    subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)
    existing = set(WORK.glob(f"callgrind.{pid}.*"))
    send_batch()
    subprocess.run(["callgrind_control", "--dump", str(pid)], check=True, capture_output=True)
    for _ in range(100):
        dumps = set(WORK.glob(f"callgrind.{pid}.*")) - existing
        if dumps:
            text = max(dumps, key=lambda p: p.stat().st_mtime).read_text(errors="replace")
            match = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.M)
            if match:
                return int(match.group(1))
        time.sleep(0.1)
    raise SystemExit(f"no callgrind dump from {pid} in {WORK}")


def measure(upstream: int, source: Path | None, extra: dict, requests: int) -> dict[str, float]:
    """{mode: instructions per request} for one gateway."""
    port = fixtures.free_port()
    config = WORK / "instructions.yaml"
    base = f"http://127.0.0.1:{upstream}"
    config.write_text(yaml.safe_dump({
        "upstreams": {"json": {"url": f"{base}/json/v1", "pool": {"warm": CONCURRENCY}},
                      "sse": {"url": f"{base}/sse/v1", "pool": {"warm": CONCURRENCY}}},
        "models": {"bench": ["json/bench"], "bench-sse": ["sse/bench"]},
        "keys": [{"name": "bench", "key": CLIENT_KEY}], **extra}))
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={WORK}/callgrind.%p",
            str(ROOT / ".venv" / "bin" / "python"), "-m", "firsttoken", "serve", "--config", str(config),
            "--port", str(port)]
    env = {"PYTHONPATH": str(source)} if source is not None else None
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    out: dict[str, float] = {}
    with process(argv, WORK / "instructions.log", env) as proc:
        fixtures.wait_for(f"http://127.0.0.1:{port}/readyz", seconds=300)
        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True, capture_output=True)
        for mode, model in (("json", "bench"), ("stream", "bench-sse")):
            body = fixtures.request_body(model, mode == "stream")
            asyncio.run(send(url, body, requests))  # warm: caches, specialised bytecode, pools
            out[mode] = counted(proc.pid, lambda body=body: asyncio.run(send(url, body, requests))) / requests
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="6f5a7db", help="the revision to compare against")
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    WORK.mkdir(parents=True, exist_ok=True)
    log = WORK / "instructions-journeys.db"
    log.unlink(missing_ok=True)
    variants = {
        "baseline": (baseline_source(args.baseline), {}),
        "this code": (None, {"journeys": {"log": str(log)}}),
        "no log": (None, {"journeys": {"log": None}}),
    }
    upstream = fixtures.free_port()
    figures: dict[str, dict[str, float]] = {}
    with ExitStack() as stack:
        stack.enter_context(nginx(fixtures.upstream_nginx_conf(str(WORK), upstream), "upstream"))
        for name, (source, extra) in variants.items():
            figures[name] = measure(upstream, source, extra, args.requests)
            print(f"{name:<10} " + "  ".join(f"{m} {v / 1000:,.0f} k instructions/request"
                                             for m, v in figures[name].items()), flush=True)
    print()
    print(f"baseline {args.baseline} · {args.requests} requests per mode, {CONCURRENCY} at a time, after as many "
          f"to warm up · valgrind callgrind, all threads")
    print()
    print("| mode | variant | k instructions/request | ÷ baseline |")
    print("|---|---|---|---|")
    for mode in ("json", "stream"):
        for name in variants:
            value = figures[name][mode]
            print(f"| {mode} | {name} | {value / 1000:,.0f} | {value / figures['baseline'][mode]:.3f}× |")


if __name__ == "__main__":
    main()
