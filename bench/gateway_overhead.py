"""What a gateway adds: the same load sent directly, through firsttoken, through LiteLLM's proxy, through
Portkey's open-source gateway and through nginx proxy_pass, against one minimal fast upstream, in one run
on one machine.

    .venv/bin/python bench/gateway_overhead.py [--seconds 5] [--repeat 3] [--skip-litellm] [--skip-portkey]

Prints requests/s and p50/p99 latency added over the direct path, at concurrency 1 and 32,
non-streaming and streaming, with the ratios the targets are stated in. LiteLLM is pip-installed
into bench/.work/litellm and Portkey npm-installed into bench/.work/portkey on first use (Portkey needs
node and npm). A benchmark, run by hand; CI never runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
import fixtures  # noqa: E402
import wrk  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / ".work"
LITELLM_VENV = WORK / "litellm"
PORTKEY_DIR = WORK / "portkey"
PORTKEY_VERSION = "1.15.2"
# What Portkey's own package-lock.json (and so its Docker image) runs on. The package's ranges let npm pick a
# newer @hono/node-server, whose Response keeps the upstream fetch's immutable headers, and then every streamed
# reply fails with "TypeError: immutable" (Portkey-AI/gateway#1389); JSON replies still work.
PORTKEY_PINS = {"@hono/node-server": "1.13.5", "@hono/node-ws": "1.2.0", "hono": "4.9.7"}
# Portkey's start-server.js has no host option and listens on every interface: this, loaded with node --import,
# makes a listen() without a host listen on the loopback only.
PORTKEY_LOOPBACK = """import net from "node:net";
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (port, host, ...rest) {
  if (typeof port === "number" && (host === undefined || typeof host === "function")) {
    return listen.call(this, port, "127.0.0.1", ...(host === undefined ? rest : [host, ...rest]));
  }
  return listen.call(this, port, host, ...rest);
};
"""
CLIENT_KEY = wrk.CLIENT_KEY


@contextmanager
def process(argv: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


@contextmanager
def nginx(conf: str, name: str) -> Iterator[None]:
    path = WORK / f"{name}.conf"
    path.write_text(conf)
    with process(["nginx", "-p", str(WORK), "-c", str(path), "-g", "daemon off;"], WORK / f"{name}.log"):
        time.sleep(0.5)
        yield


def ensure_litellm() -> Path:
    binary = LITELLM_VENV / "bin" / "litellm"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
        subprocess.run([str(LITELLM_VENV / "bin" / "pip"), "install", "-q", "litellm[proxy]"], check=True)
    return binary


def ensure_portkey() -> Path:
    """Portkey's gateway, npm-installed into bench/.work/portkey (again whenever the pins here change)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        sys.exit("Portkey needs node and npm (Debian: sudo apt-get install -y nodejs npm); or pass --skip-portkey")
    entry = PORTKEY_DIR / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
    manifest = {"private": True, "dependencies": {"@portkey-ai/gateway": PORTKEY_VERSION}, "overrides": PORTKEY_PINS}
    package = PORTKEY_DIR / "package.json"
    if not entry.exists() or not package.exists() or json.loads(package.read_text()) != manifest:
        PORTKEY_DIR.mkdir(parents=True, exist_ok=True)
        package.write_text(json.dumps(manifest, indent=2) + "\n")
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=PORTKEY_DIR, check=True)
    (PORTKEY_DIR / "loopback.mjs").write_text(PORTKEY_LOOPBACK)
    return entry


def baseline_source(revision: str) -> Path:
    """The package source at a git revision, checked out in a worktree under bench/.work, so that one run
    can measure before and after a change on the same machine at the same moment."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", revision], check=True,
                            capture_output=True, text=True).stdout.strip()
    tree = WORK / f"baseline-{commit}"
    if not tree.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit], check=True,
                       capture_output=True)
    return tree / "src"


@contextmanager
def firsttoken(upstream: int, workers: int, source: Path | None = None) -> Iterator[str]:
    with firsttoken_process(upstream, workers, source) as (url, _proc):
        yield url


@contextmanager
def firsttoken_process(upstream: int, workers: int, source: Path | None = None, extra: dict | None = None
                       ) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A gateway in front of the bench upstream (`extra`: more settings): its URL and its process."""
    port = fixtures.free_port()
    config = WORK / f"firsttoken-{workers}.yaml"
    base = f"http://127.0.0.1:{upstream}"
    config.write_text(yaml.safe_dump({
        "upstreams": {"json": {"url": f"{base}/json/v1", "pool": {"warm": 32}},
                      "sse": {"url": f"{base}/sse/v1", "pool": {"warm": 32}}},
        "models": {"bench": ["json/bench"], "bench-sse": ["sse/bench"]},
        "keys": [{"name": "bench", "key": CLIENT_KEY}],  # both proxies check a client key
        # Every request here is the same: with its edge cache on, the gateway would answer all but the first
        # itself, where the peers cross to the upstream each time. Off, it is measured as the proxy it is.
        "cache": False,
        **(extra or {}),
    }))
    argv = [str(ROOT / ".venv" / "bin" / "python"), "-m", "firsttoken", "serve", "--config", str(config),
            "--port", str(port), "--workers", str(workers)]
    env = {"PYTHONPATH": str(source)} if source is not None else None  # ahead of the editable install
    with process(argv, WORK / f"firsttoken-{workers}.log", env) as proc:
        fixtures.wait_for(f"http://127.0.0.1:{port}/readyz")
        yield f"http://127.0.0.1:{port}", proc


@contextmanager
def floor_proxy(upstream: int) -> Iterator[str]:
    port = fixtures.free_port()
    argv = [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "bench" / "floor_proxy.py"), str(port),
            f"http://127.0.0.1:{upstream}"]
    with process(argv, WORK / "floor.log"):
        time.sleep(2.0)
        yield f"http://127.0.0.1:{port}"


@contextmanager
def litellm(upstream: int, provider: str = "openai") -> Iterator[str]:
    """LiteLLM's proxy in front of the bench upstream; `provider`: LiteLLM's name for what the upstream is.
    For `openai` (and `hosted_vllm`) LiteLLM's Messages and Responses routes call the upstream's own
    /responses; for `together_ai` they translate to chat completions, as the bench upstream needs."""
    port = fixtures.free_port()
    config = WORK / "litellm.yaml"
    base = f"http://127.0.0.1:{upstream}"
    config.write_text(yaml.safe_dump({
        "model_list": [
            {"model_name": "bench", "litellm_params": {"model": f"{provider}/bench", "api_base": f"{base}/json/v1",
                                                       "api_key": "sk-bench"}},
            {"model_name": "bench-sse", "litellm_params": {"model": f"{provider}/bench",
                                                           "api_base": f"{base}/sse/v1", "api_key": "sk-bench"}},
        ],
        "litellm_settings": {"drop_params": True},
        "general_settings": {"master_key": CLIENT_KEY},
    }))
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False"}
    argv = [str(ensure_litellm()), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
            "--num_workers", "1"]
    with process(argv, WORK / "litellm.log", env):
        fixtures.wait_for(f"http://127.0.0.1:{port}/health/liveliness", 180)
        yield f"http://127.0.0.1:{port}"


def portkey_headers(upstream: int, stream: bool) -> dict[str, str]:
    """Portkey is configured per request: provider, where that provider is, and the provider key."""
    return {"x-portkey-provider": "openai",
            "x-portkey-custom-host": f"http://127.0.0.1:{upstream}/{'sse' if stream else 'json'}/v1",
            "Authorization": "Bearer sk-bench"}


def check_proxied(url: str, headers_for: dict[bool, dict[str, str]]) -> None:
    """One JSON and one streamed request: a 200 with the upstream's answer, byte for byte, or no measuring."""
    for stream in (False, True):
        request = urllib.request.Request(url, fixtures.request_body("bench", stream).encode(),
                                         {"Content-Type": "application/json", **headers_for[stream]})
        with urllib.request.urlopen(request, timeout=10) as reply:
            status, body = reply.status, reply.read().decode()
        expected = fixtures.STREAM if stream else fixtures.COMPLETION
        if status != 200 or body != expected:
            raise RuntimeError(f"{url} ({'stream' if stream else 'json'}) answered {status}: {body[:300]!r}")


@contextmanager
def portkey(upstream: int) -> Iterator[str]:
    """Portkey's gateway, one Node process (one worker), headless (no console UI), on the loopback. Its
    streaming path waits a fixed 25 ms before passing on the first chunk (src/handlers/streamHandler.ts),
    which alone bounds streamed requests at c=1 to about 40/s."""
    entry = ensure_portkey()
    port = fixtures.free_port()
    argv = ["node", "--import", (PORTKEY_DIR / "loopback.mjs").as_uri(), str(entry), f"--port={port}", "--headless"]
    with process(argv, WORK / "portkey.log"):
        fixtures.wait_for(f"http://127.0.0.1:{port}/")
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        check_proxied(url, {stream: portkey_headers(upstream, stream) for stream in (False, True)})
        yield url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=5, help="length of one wrk run")
    parser.add_argument("--repeat", type=int, default=3, help="wrk runs per cell; the median one is reported "
                                                                "(this machine is shared and noisy)")
    parser.add_argument("--skip-litellm", action="store_true")
    parser.add_argument("--skip-portkey", action="store_true")
    parser.add_argument("--baseline", metavar="REVISION",
                        help="also measure firsttoken (1 worker) as it was at this git revision")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    if not args.skip_portkey:
        ensure_portkey()  # before minutes of measuring, not after
    upstream_port, proxy_port = fixtures.free_port(), fixtures.free_port()

    results: dict[str, dict[str, wrk.WrkResult]] = {}

    def measure(name: str, url_for: dict[bool, str], model_for: dict[bool, str],
                headers_for: dict[bool, dict[str, str]] | None = None) -> None:
        for stream in (False, True):
            for connections in (1, 32):
                key = f"{'stream' if stream else 'json'}-c{connections}"
                runs = [wrk.run(url_for[stream], fixtures.request_body(model_for[stream], stream), connections,
                                args.seconds, WORK, headers=(headers_for or {}).get(stream))
                        for _ in range(args.repeat)]
                result = sorted(runs, key=lambda r: r.requests_per_s)[len(runs) // 2]
                results.setdefault(name, {})[key] = result
                print(f"  {name:<18} {key:<10} {result.requests_per_s:>9.0f} req/s  p50 {result.p50_ms:7.3f} ms  "
                      f"p99 {result.p99_ms:7.3f} ms  errors {result.errors}", flush=True)

    same = {False: "bench", True: "bench"}
    aliases = {False: "bench", True: "bench-sse"}
    with ExitStack() as stack:
        stack.enter_context(nginx(fixtures.upstream_nginx_conf(str(WORK), upstream_port), "upstream"))
        stack.enter_context(nginx(fixtures.proxy_nginx_conf(str(WORK), proxy_port, upstream_port), "proxy"))
        direct = f"http://127.0.0.1:{upstream_port}"
        proxied = f"http://127.0.0.1:{proxy_port}"
        print(f"measuring (wrk, 1 thread, {args.seconds} s runs, median of {args.repeat}):", flush=True)
        measure("direct", {False: f"{direct}/json/v1/chat/completions",
                           True: f"{direct}/sse/v1/chat/completions"}, same)
        measure("nginx proxy_pass", {False: f"{proxied}/json/v1/chat/completions",
                                     True: f"{proxied}/sse/v1/chat/completions"}, same)
        with floor_proxy(upstream_port) as floor:
            url = f"{floor}/v1/chat/completions"
            measure("raw ASGI floor", {False: url, True: url}, same)
        for workers in (1, 2):
            with firsttoken(upstream_port, workers) as gateway:
                url = f"{gateway}/v1/chat/completions"
                measure(f"firsttoken w{workers}", {False: url, True: url}, aliases)
        if args.baseline:
            with firsttoken(upstream_port, 1, baseline_source(args.baseline)) as gateway:
                url = f"{gateway}/v1/chat/completions"
                measure("firsttoken baseline", {False: url, True: url}, aliases)
        if not args.skip_litellm:
            with litellm(upstream_port) as proxy:
                url = f"{proxy}/v1/chat/completions"
                measure("litellm w1", {False: url, True: url}, aliases)
        if not args.skip_portkey:
            with portkey(upstream_port) as url:
                measure("portkey w1", {False: url, True: url}, same,
                        {stream: portkey_headers(upstream_port, stream) for stream in (False, True)})

    print()
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps({n: {k: vars(v) for k, v in r.items()} for n, r in results.items()}, indent=2))


def report(results: dict[str, dict[str, wrk.WrkResult]]) -> str:
    lines = [f"machine: {platform.node()} · {os.cpu_count()} cores · {platform.platform()} · "
             f"python {platform.python_version()}", "",
             "| path | mode | c | req/s | p50 added (ms) | p99 added (ms) | errors |",
             "|---|---|---|---|---|---|---|"]
    direct = results["direct"]
    for name, by_key in results.items():
        for key, r in by_key.items():
            mode, c = key.split("-c")
            added50 = r.p50_ms - direct[key].p50_ms
            added99 = r.p99_ms - direct[key].p99_ms
            lines.append(f"| {name} | {mode} | {c} | {r.requests_per_s:,.0f} | "
                         f"{'—' if name == 'direct' else f'{added50:.3f}'} | "
                         f"{'—' if name == 'direct' else f'{added99:.3f}'} | {r.errors} |")
    lines += ["", "| ratio | mode | c | value |", "|---|---|---|---|"]
    ours = results.get("firsttoken w1", {})
    for key in ours:
        mode, c = key.split("-c")
        if "litellm w1" in results:
            lines.append(f"| firsttoken w1 / litellm w1 req/s | {mode} | {c} | "
                         f"{ours[key].requests_per_s / results['litellm w1'][key].requests_per_s:.1f}× |")
        if "portkey w1" in results:
            lines.append(f"| firsttoken w1 / portkey w1 req/s | {mode} | {c} | "
                         f"{ours[key].requests_per_s / results['portkey w1'][key].requests_per_s:.2f}× |")
        lines.append(f"| firsttoken w1 / nginx req/s | {mode} | {c} | "
                     f"{ours[key].requests_per_s / results['nginx proxy_pass'][key].requests_per_s:.1%} |")
        lines.append(f"| firsttoken w1 / raw ASGI floor req/s | {mode} | {c} | "
                     f"{ours[key].requests_per_s / results['raw ASGI floor'][key].requests_per_s:.0%} |")
        if "firsttoken baseline" in results:
            before = results["firsttoken baseline"][key]
            lines.append(f"| firsttoken w1 / baseline w1 req/s | {mode} | {c} | "
                         f"{ours[key].requests_per_s / before.requests_per_s:.2f}× |")
        if "firsttoken w2" in results:
            lines.append(f"| firsttoken w2 / w1 req/s | {mode} | {c} | "
                         f"{results['firsttoken w2'][key].requests_per_s / ours[key].requests_per_s:.2f}× |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
