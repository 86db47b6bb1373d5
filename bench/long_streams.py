"""Many long streams held open at once through one worker: N concurrent streams of T tokens at R tokens/s,
sent directly, through nginx proxy_pass, through firsttoken (one worker) and through LiteLLM's proxy (one
worker), in one run on one machine.

    .venv/bin/python bench/long_streams.py [--n 250,1000,2000] [--tokens 100] [--rate 10]
        [--pool-max default|256,4096] [--slack-s 5] [--revision REV] [--skip-litellm] [--json PATH]

The upstream is bench/lean_stream_upstream.py (raw uvloop protocols, one ticker for every stream); each
token carries the time it was written. The client (bench/long_streams_client.py, its own process) opens
the N streams over --ramp-s and measures TTFT and every token's delivery latency. With two cores or
more the proxy runs on CPU 0 and the upstream and the client on CPU 1. Each proxy is started afresh for
each N, warmed with a few short streams, and measured over one phase bounded by ramp + T/R + --slack-s.

Every default it depends on: firsttoken's edge cache off (`cache: false`: every stream is a different
request, and the bench measures the relay, not a lookup; with the cache on, each stream would also be
captured to be kept), its journey log on, one worker; nginx and LiteLLM as configured below.

Reported per path and N: TTFT p50/p99 and token delivery latency p50/p99 added over the direct path, the
proxy's CPU (its process tree, utime + stime) per SSE event relayed over the phase and its share of a core
while every stream is open, its RSS growth per open stream (RSS with every stream open minus RSS idle just
before), the peak of streams open at the upstream at once, and errors.
LiteLLM is pip-installed into bench/.work/litellm on first use. A benchmark, run by hand; CI never runs it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).parent))
import fixtures  # noqa: E402
from gateway_overhead import CLIENT_KEY, baseline_source, ensure_litellm, process  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
WORK = BENCH / ".work"
PYTHON = str(ROOT / ".venv" / "bin" / "python")
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")

Started = tuple[str, int | None]  # a path's base URL and the pid of its proxy (None: direct)


@dataclass
class Settings:
    tokens: int
    rate: float
    ramp_s: float
    slack_s: float
    pin: bool
    max_n: int
    source: Path | None = None  # firsttoken's package source, when not the working tree's
    revision: str = "the working tree"

    @property
    def deadline_s(self) -> float:
        return self.ramp_s + self.tokens / self.rate + self.slack_s

    def cpu(self, role: str) -> list[str]:
        """A taskset prefix: the proxy alone on CPU 0, the upstream and the client on CPU 1."""
        return ["taskset", "-c", "0" if role == "proxy" else "1"] if self.pin else []


# --- /proc --------------------------------------------------------------------------------------

def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def process_tree(root: int) -> list[int]:
    """The pid and its descendants (nginx's worker, any worker LiteLLM forks)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                children.setdefault(int(_stat(int(entry))[1]), []).append(int(entry))
            except (OSError, IndexError):
                continue
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def cpu_seconds(root: int) -> dict[int, float]:
    """utime + stime of each process in the tree, with what its reaped children used (cutime + cstime)."""
    found = {}
    for pid in process_tree(root):
        try:
            fields = _stat(pid)
        except OSError:
            continue
        found[pid] = sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICKS
    return found


def rss_bytes(root: int) -> int:
    total = 0
    for pid in process_tree(root):
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
        except OSError:
            continue
    return total


def raise_fd_limit() -> None:
    """To the hard limit, here and so in every process started from here (limits are inherited)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# --- the processes ------------------------------------------------------------------------------

def upstream_stats(port: int, method: str = "GET") -> dict[str, int]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/stats", method=method)
    with urllib.request.urlopen(request, timeout=5) as response:
        return dict(json.loads(response.read()))


@dataclass
class Upstream:
    port: int
    pid: int


@contextmanager
def lean_upstream(port: int, settings: Settings) -> Iterator[Upstream]:
    argv = [*settings.cpu("upstream"), PYTHON, str(BENCH / "lean_stream_upstream.py"), "--port", str(port),
            "--tokens", str(settings.tokens), "--rate", str(settings.rate)]
    with process(argv, WORK / "long-streams-upstream.log") as proc:
        fixtures.wait_for(f"http://127.0.0.1:{port}/v1/models", 30)
        yield Upstream(port, proc.pid)


@contextmanager
def direct(upstream: int) -> Iterator[Started]:
    yield f"http://127.0.0.1:{upstream}", None


def nginx_conf(port: int, upstream: int, max_n: int) -> str:
    """proxy_pass without buffering, like fixtures.proxy_nginx_conf, but sized for long streams: that one's
    4096 worker_connections barely cover 2000 streams (two connections each), and idle upstream
    connections kept between phases would crowd it further."""
    connections = 2 * max_n + 1024
    return f"""
worker_processes 1;
worker_rlimit_nofile {connections + 64};
pid {WORK}/long-streams-nginx.pid;
error_log {WORK}/long-streams-nginx-error.log warn;
events {{ worker_connections {connections}; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  upstream up {{ server 127.0.0.1:{upstream}; keepalive 1024; }}
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    location / {{
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 600s;
    }}
  }}
}}
"""


@contextmanager
def nginx(upstream: int, settings: Settings) -> Iterator[Started]:
    port = fixtures.free_port()
    conf = WORK / "long-streams-nginx.conf"
    conf.write_text(nginx_conf(port, upstream, settings.max_n))
    argv = [*settings.cpu("proxy"), "nginx", "-p", str(WORK), "-c", str(conf), "-g", "daemon off;"]
    with process(argv, WORK / "long-streams-nginx.log") as proc:
        time.sleep(0.5)
        yield f"http://127.0.0.1:{port}", proc.pid


def firsttoken_config(upstream: int, pool_max: int | None) -> dict[str, Any]:
    pool = {"max": pool_max} if pool_max is not None else {}
    return {"upstreams": {"lean": {"url": f"http://127.0.0.1:{upstream}/v1", "api": "openai", "pool": pool}},
            "models": {"lean": ["lean/lean"]},
            "keys": [{"name": "bench", "key": CLIENT_KEY}],
            "cache": False,  # the relay, as the peers are: see the docstring
            "journeys": {"log": str(WORK / "long-streams-journeys.db")}}


@contextmanager
def firsttoken(upstream: int, settings: Settings, pool_max: int | None) -> Iterator[Started]:
    port = fixtures.free_port()
    config = WORK / "long-streams-firsttoken.yaml"
    config.write_text(yaml.safe_dump(firsttoken_config(upstream, pool_max)))
    argv = [*settings.cpu("proxy"), PYTHON, "-m", "firsttoken", "serve", "--config", str(config),
            "--port", str(port), "--workers", "1"]
    env = {"PYTHONPATH": str(settings.source)} if settings.source is not None else None  # ahead of the install
    with process(argv, WORK / "long-streams-firsttoken.log", env) as proc:
        fixtures.wait_for(f"http://127.0.0.1:{port}/readyz")
        yield f"http://127.0.0.1:{port}", proc.pid


@contextmanager
def litellm(upstream: int, settings: Settings) -> Iterator[Started]:
    port = fixtures.free_port()
    config = WORK / "long-streams-litellm.yaml"
    config.write_text(yaml.safe_dump({
        "model_list": [{"model_name": "lean", "litellm_params": {
            "model": "openai/lean", "api_base": f"http://127.0.0.1:{upstream}/v1", "api_key": "sk-bench"}}],
        "litellm_settings": {"drop_params": True},
        "general_settings": {"master_key": CLIENT_KEY},
    }))
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False"}
    argv = [*settings.cpu("proxy"), str(ensure_litellm()), "--config", str(config), "--host", "127.0.0.1",
            "--port", str(port), "--num_workers", "1"]
    with process(argv, WORK / "long-streams-litellm.log", env) as proc:
        fixtures.wait_for(f"http://127.0.0.1:{port}/health/liveliness", 180)
        yield f"http://127.0.0.1:{port}", proc.pid


# --- one phase ----------------------------------------------------------------------------------

def run_client(url: str, n: int, tokens: int, ramp_s: float, deadline_s: float, settings: Settings,
               on_open: Callable[[int], None] = lambda _k: None) -> dict[str, Any]:
    """The client's result; `on_open` is called with the streams open once all should be."""
    argv = [*settings.cpu("client"), PYTHON, str(BENCH / "long_streams_client.py"), "--url", url, "--n", str(n),
            "--tokens", str(tokens), "--ramp-s", str(ramp_s), "--deadline-s", str(deadline_s)]
    client = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout is not None
        line = client.stdout.readline()
        if line.startswith("open "):
            on_open(int(line.split()[1]))
            line = client.stdout.readline()
        client.wait(30)
        if not line.startswith("{"):
            raise RuntimeError(f"the client failed (exit {client.returncode}); see its output above")
        return dict(json.loads(line))
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()


def measure(url: str, pid: int | None, n: int, upstream: Upstream, settings: Settings) -> dict[str, Any]:
    """One phase: warm the path, note the proxy idle, then hold N streams open and read them to the end."""
    warm = run_client(url, 20, 5, 0.2, 30.0, settings)
    time.sleep(1.0)
    idle_rss = rss_bytes(pid) if pid else 0
    rss_open: list[int] = []
    open_streams = [0]

    steady: list[float] = []

    def on_open(count: int) -> None:
        open_streams[0] = count
        if not pid:
            return
        start, cpu_start = time.monotonic(), sum(cpu_seconds(pid).values())
        for _ in range(3):  # the largest of a few samples: a read may land between frees and allocations
            rss_open.append(rss_bytes(pid))
            time.sleep(0.2)
        # the proxy's CPU while every stream is open: from here until a second before the first one ends
        window = settings.tokens / settings.rate - settings.ramp_s - 2.0
        if window > 1.0:
            time.sleep(max(0.0, window - (time.monotonic() - start)))
            steady.append((sum(cpu_seconds(pid).values()) - cpu_start) / (time.monotonic() - start))

    upstream_stats(upstream.port, "DELETE")
    cpu_before = cpu_seconds(pid) if pid else {}
    upstream_before = sum(cpu_seconds(upstream.pid).values())
    client_cpu_before = _children_cpu()
    wall = time.monotonic()
    result = run_client(url, n, settings.tokens, settings.ramp_s, settings.deadline_s, settings, on_open)
    wall = time.monotonic() - wall
    cpu_after = cpu_seconds(pid) if pid else {}
    upstream_cpu = sum(cpu_seconds(upstream.pid).values()) - upstream_before
    proxy_cpu = sum(after - cpu_before.get(p, 0.0) for p, after in cpu_after.items())
    result.update(
        warmup_errors=warm["errors"], idle_rss=idle_rss, open_rss=max(rss_open, default=0),
        open_streams=open_streams[0], proxy_cpu_s=proxy_cpu, wall_s=wall, steady_cpu=steady[0] if steady else None,
        client_cpu_s=_children_cpu() - client_cpu_before, upstream_cpu_s=upstream_cpu,
        upstream=upstream_stats(upstream.port))
    return result


def _children_cpu() -> float:
    """CPU used by this process's reaped children: the client, reaped before the next reading."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def describe(name: str, n: int, r: dict[str, Any]) -> str:
    lat, wall = r["latency_s"], r["wall_s"]
    cpu = f"{r['proxy_cpu_s'] / r['events'] * 1e6:.1f} µs/event" if r["events"] and r["proxy_cpu_s"] else "—"
    return (f"  {name:<28} N={n:<5} completed {r['completed']:>5}/{r['n']}  events {r['events']:>7}  "
            f"ttft p50 {_ms(_pct(r, 0.5))} p99 {_ms(_pct(r, 0.99))} ms  token p50 {_ms(lat['p50'])} "
            f"p99 {_ms(lat['p99'])} ms  proxy {cpu}, {_share(r['steady_cpu'])} of a core with all open  "
            f"client {r['client_cpu_s'] / wall:.0%}  upstream {r['upstream_cpu_s'] / wall:.0%}  "
            f"upstream peak {r['upstream']['max_open']}  errors {r['errors'] or 0}")


def _share(cores: float | None) -> str:
    return f"{cores:.0%}" if cores is not None else "—"


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1000:.1f}" if seconds is not None and not math.isinf(seconds) else "—"


def _pct(r: dict[str, Any], q: float) -> float | None:
    """A TTFT percentile over all N streams; a stream that never got a first token counts as infinitely late."""
    ttfts = sorted(r["ttft_s"]) + [math.inf] * (r["n"] - len(r["ttft_s"]))
    return ttfts[min(len(ttfts) - 1, int(q * len(ttfts)))] if ttfts else None


# --- the run ------------------------------------------------------------------------------------

def paths(args: argparse.Namespace, upstream: int, settings: Settings
          ) -> list[tuple[str, Callable[[], AbstractContextManager[Started]]]]:
    chosen = set(args.paths.split(","))
    found: list[tuple[str, Callable[[], AbstractContextManager[Started]]]] = [("direct", lambda: direct(upstream))]
    if "nginx" in chosen:
        found.append(("nginx proxy_pass", lambda: nginx(upstream, settings)))
    for value in args.pool_max.split(",") if "firsttoken" in chosen else []:
        pool_max = None if value == "default" else int(value)
        found.append((f"firsttoken w1, pool.max {pool_max or 'default'}",
                      _starter(firsttoken, upstream, settings, pool_max)))
    if "litellm" in chosen and not args.skip_litellm:
        found.append(("litellm w1", lambda: litellm(upstream, settings)))
    return found


def _commit(revision: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", revision], check=True,
                          capture_output=True, text=True).stdout.strip()


def versions(settings: Settings, litellm_used: bool) -> str:
    nginx_v = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip().split("/")[-1]
    found = f"firsttoken at {settings.revision}, nginx {nginx_v}"
    if litellm_used:
        python = str(ensure_litellm().parent / "python")
        version = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
                                 capture_output=True, text=True).stdout.strip()
        found += f", LiteLLM {version}"
    return found


def _starter(start: Callable[..., AbstractContextManager[Started]], *args: Any
             ) -> Callable[[], AbstractContextManager[Started]]:
    return lambda: start(*args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="250,1000,2000", help="streams held open at once, a list")
    parser.add_argument("--tokens", type=int, default=100, help="tokens per stream")
    parser.add_argument("--rate", type=float, default=10.0, help="tokens per second per stream")
    parser.add_argument("--ramp-s", type=float, default=2.0, help="the streams are opened evenly over this long")
    parser.add_argument("--slack-s", type=float, default=5.0, help="a phase lasts ramp + tokens/rate + this, at most")
    parser.add_argument("--pool-max", default="default",
                        help="firsttoken's upstream pool.max, a list: each value is a path ('default': as the "
                             "measured source sets it)")
    parser.add_argument("--no-pin", action="store_true", help="do not pin the proxy and the rest to separate CPUs")
    parser.add_argument("--skip-litellm", action="store_true")
    parser.add_argument("--paths", default="nginx,firsttoken,litellm",
                        help="what is measured besides the direct path, a list")
    parser.add_argument("--revision", help="measure firsttoken as it is at this git revision (a worktree under "
                                           "bench/.work), not the working tree")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    args = parser.parse_args()
    ns = [int(n) for n in args.n.split(",")]
    settings = Settings(args.tokens, args.rate, args.ramp_s, args.slack_s,
                        pin=not args.no_pin and (os.cpu_count() or 1) >= 2, max_n=max(ns),
                        source=baseline_source(args.revision) if args.revision else None,
                        revision=_commit(args.revision) if args.revision else "the working tree")
    WORK.mkdir(parents=True, exist_ok=True)
    raise_fd_limit()
    results: dict[str, dict[int, dict[str, Any]]] = {}
    upstream = fixtures.free_port()
    print(f"{settings.tokens} tokens at {settings.rate:g}/s per stream, opened over {settings.ramp_s:g} s; "
          f"phases bounded at {settings.deadline_s:g} s", flush=True)
    with lean_upstream(upstream, settings) as lean:
        for n in ns:  # every path at one N, then the next N: the comparisons at one N are close in time
            for name, start in paths(args, upstream, settings):
                with start() as (url, pid):
                    result = measure(url, pid, n, lean, settings)
                results.setdefault(name, {})[n] = result
                print(describe(name, n, result), flush=True)
                time.sleep(1.0)
    print()
    print(report(results, settings))
    print(versions(settings, any(name.startswith("litellm") for name in results)))
    if args.json:
        args.json.write_text(json.dumps({"settings": vars(settings), "results": results}, indent=2, default=str))


# --- the report ---------------------------------------------------------------------------------

def _added(value: float | None, base: float | None) -> str:
    if value is None or base is None:
        return "—"
    if math.isinf(value):
        return "no first token"
    return f"{(value - base) * 1000:+.1f}"


def _errors(r: dict[str, Any]) -> str:
    total = sum(r["errors"].values())
    return "0" if not total else f"{total}: " + ", ".join(f"{k} {v}" for k, v in r["errors"].items())


def report(results: dict[str, dict[int, dict[str, Any]]], settings: Settings) -> str:
    lines = [f"machine: {platform.node()} · {os.cpu_count()} cores · {platform.platform()} · "
             f"python {platform.python_version()}",
             f"{settings.tokens} tokens at {settings.rate:g} tokens/s per stream, streams opened over "
             f"{settings.ramp_s:g} s, phases bounded at {settings.deadline_s:g} s; "
             + ("proxy on CPU 0, upstream and client on CPU 1" if settings.pin else "no CPU pinning"), "",
             "| path | N | TTFT p50 added (ms) | TTFT p99 added (ms) | token latency p50 added (ms) "
             "| token latency p99 added (ms) | CPU per event (µs) | RSS per open stream (KiB) "
             "| proxy CPU, all open (% of a core) | upstream peak streams | errors |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    base = results["direct"]
    for name, by_n in results.items():
        for n, r in by_n.items():
            lines.append(_row(name, n, r, base[n]))
    lines += ["", "direct: the absolute figures (ms), not an addition."]
    return "\n".join(lines)


def _row(name: str, n: int, r: dict[str, Any], d: dict[str, Any]) -> str:
    lat, dlat = r["latency_s"], d["latency_s"]
    if name == "direct":
        figures = [_ms(_pct(r, 0.5)), _ms(_pct(r, 0.99)), _ms(lat["p50"]), _ms(lat["p99"]), "—", "—", "—"]
    else:
        cpu = f"{r['proxy_cpu_s'] / r['events'] * 1e6:.0f}" if r["events"] else "—"
        per_stream = (r["open_rss"] - r["idle_rss"]) / max(r["open_streams"], 1) / 1024
        figures = [_added(_pct(r, 0.5), _pct(d, 0.5)), _added(_pct(r, 0.99), _pct(d, 0.99)),
                   _added(lat["p50"], dlat["p50"]), _added(lat["p99"], dlat["p99"]), cpu,
                   f"{per_stream:.1f}" if r["open_streams"] else "—", _share(r["steady_cpu"])]
    return (f"| {name} | {n:,} | " + " | ".join(figures)
            + f" | {r['upstream']['max_open']:,} | {_errors(r)} |")


if __name__ == "__main__":
    main()
