"""What a Redis that stops answering costs the gateway: the same load with Redis healthy, frozen (SIGSTOP:
connections accepted, nothing answered), thawed, stopped and restarted, through this code and through
a revision from before the circuit breaker, in one run.

    .venv/bin/python bench/redis_outage.py [--baseline 89120de] [--seconds 5] [--connections 16]

The gateway keeps its client key's rate limits and its edge cache in one real redis-server, so every
request runs the limits' Lua script and writes its answer (`cache-control: no-cache`: asked upstream,
kept), in front of the static nginx upstream of the overhead benchmark. Each phase is a wrk run; the
gateway's log is read after each for the warnings it wrote. Run by hand; CI never runs it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
import fixtures  # noqa: E402
import wrk  # noqa: E402
from gateway_overhead import WORK, baseline_source, nginx, process  # noqa: E402

PHASES = ("healthy", "frozen", "thawed", "stopped", "restarted")


class Redis:
    """A redis-server on a fixed port that can be frozen, thawed, stopped and started again."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", str(WORK)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True,
                             text=True).stdout.strip() != "PONG":
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()


def measure(name: str, source: Path | None, upstream: int, seconds: float, connections: int) -> list[list[str]]:
    redis = Redis(fixtures.free_port())
    port = fixtures.free_port()
    url = f"redis://127.0.0.1:{redis.port}/0"
    config = WORK / f"redis-outage-{name}.yaml"
    config.write_text(yaml.safe_dump({
        "upstreams": {"json": {"url": f"http://127.0.0.1:{upstream}/json/v1", "pool": {"warm": connections}}},
        "models": {"bench": ["json/bench"]},
        "keys": [{"name": "bench", "key": wrk.CLIENT_KEY, "rpm": 100_000_000, "tpm": 1_000_000_000}],
        "limits": {"redis": url},
        "cache": {"backend": "redis", "url": url, "semantic": False, "prefix": f"bench-{name}:"},
        "journeys": {"log": None}}))
    log = WORK / f"redis-outage-{name}.log"
    env = {"PYTHONPATH": str(source)} if source is not None else None
    argv = [str(Path(sys.executable)), "-m", "firsttoken", "serve", "--config", str(config), "--port", str(port)]
    rows = []
    redis.start()
    try:
        with process(argv, log, env):
            fixtures.wait_for(f"http://127.0.0.1:{port}/readyz")
            body = fixtures.request_body("bench", False)
            target = f"http://127.0.0.1:{port}/v1/chat/completions"
            healthy = None
            for phase in PHASES:
                if phase == "frozen":
                    redis.signal(signal.SIGSTOP)
                elif phase == "thawed":
                    redis.signal(signal.SIGCONT)
                elif phase == "stopped":
                    redis.stop()
                elif phase == "restarted":
                    redis.start()
                lines_before = log.read_text(errors="replace").count("WARNING")
                result = wrk.run(target, body, connections, seconds, WORK, headers={"cache-control": "no-cache"})
                warnings = log.read_text(errors="replace").count("WARNING") - lines_before
                healthy = healthy or result.requests_per_s
                rows.append([name, phase, f"{result.requests_per_s:,.0f}", f"{result.requests_per_s / healthy:.2f}×",
                             f"{result.p50_ms:.2f}", f"{result.p99_ms:.1f}", str(warnings), str(result.errors)])
                print(" | ".join(rows[-1]), flush=True)
    finally:
        redis.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="89120de", help="a revision from before the circuit breaker")
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    for tool in ("redis-server", "redis-cli", "nginx", "wrk"):
        if shutil.which(tool) is None:
            raise SystemExit(f"needs {tool} (apt-get install redis-server nginx wrk)")
    WORK.mkdir(parents=True, exist_ok=True)
    upstream = fixtures.free_port()
    rows: list[list[str]] = []
    with ExitStack() as stack:
        stack.enter_context(nginx(fixtures.upstream_nginx_conf(str(WORK), upstream), "upstream"))
        rows += measure("this code", None, upstream, args.seconds, args.connections)
        rows += measure(f"baseline {args.baseline}", baseline_source(args.baseline), upstream, args.seconds,
                        args.connections)
    print()
    print(f"{args.seconds:g} s of wrk per phase, {args.connections} connections, on {os.cpu_count()} CPUs")
    print()
    print("| gateway | Redis | req/s | ÷ healthy | p50 ms | p99 ms | warning lines | errors |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
