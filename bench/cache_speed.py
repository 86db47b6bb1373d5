"""The edge cache's speed through the gateway: an exact hit and a semantic hit end to end at one connection
(p50, p99), and requests/s on exact hits against the gateway's miss path at 32, both modes, in one run.

    .venv/bin/python bench/cache_speed.py [--seconds 5] [--runtimes onnx torch]

One gateway (1 worker, SQLite cache) in front of the static nginx upstream of the overhead benchmark.
Every wrk request is the same one, so after the first it is a hit; the miss path is the same requests
with `x-firsttoken-cache: off` (straight to the upstream, nothing read or kept). A semantic hit is a
paraphrase of a stored question, asked again and again (a semantic hit stores nothing under its own key,
so each one embeds its question and searches), once per embedding runtime, each on a gateway of its own
(ONNX Runtime, the default, and torch, for the ratio). "Direct" is nginx itself, for scale. Needs
firsttoken[semantic] for the semantic rows. Run by hand; CI never runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import fixtures  # noqa: E402
import wrk  # noqa: E402
from gateway_overhead import WORK, firsttoken_process, nginx  # noqa: E402

OFF = {"x-firsttoken-cache": "off"}


def _cache_state(url: str, body: str) -> str:
    request = urllib.request.Request(url, body.encode(), {"content-type": "application/json",
                                                          "authorization": f"Bearer {wrk.CLIENT_KEY}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
        return response.headers.get("x-firsttoken-cache", "")


@contextmanager
def _gateway(upstream: int, runtime: str) -> Iterator[str]:
    """A gateway with an empty SQLite cache and semantic matching on that runtime; its chat URL."""
    cache_file = WORK / f"cache-speed-{runtime}.db"
    cache_file.unlink(missing_ok=True)
    with firsttoken_process(upstream, 1, None, {"cache": {"backend": "sqlite", "path": str(cache_file),
                                                          "semantic": True, "embedding_runtime": runtime},
                                                "journeys": {"log": None}}) as (url, _):
        yield f"{url}/v1/chat/completions"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--runtimes", nargs="+", default=["onnx", "torch"], choices=["onnx", "torch"])
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    upstream = fixtures.free_port()
    rows = []
    with ExitStack() as stack:
        stack.enter_context(nginx(fixtures.upstream_nginx_conf(str(WORK), upstream), "upstream"))
        for runtime in args.runtimes:
            with _gateway(upstream, runtime) as target:
                for mode, model in (("json", "bench"), ("stream", "bench-sse")):
                    stored, asked = (json.dumps({"model": model, "stream": mode == "stream",
                                                 "messages": [{"role": "user", "content": q}]})
                                     for q in ("How do I cook beans?", "What is the way to cook beans?"))
                    wrk.run(target, stored, 1, 1, WORK)
                    if not _cache_state(target, asked).startswith("semantic-hit"):
                        raise SystemExit("the paraphrase was not a semantic hit: is firsttoken[semantic] installed?")
                    rows.append((mode, f"semantic hit ({runtime})", 1, wrk.run(target, asked, 1, args.seconds, WORK)))
        target = stack.enter_context(_gateway(upstream, args.runtimes[0]))
        for mode, model, path in (("json", "bench", "json"), ("stream", "bench-sse", "sse")):
            body = fixtures.request_body(model, mode == "stream")
            wrk.run(target, body, 1, 1, WORK)  # the first request is the miss that fills the cache
            for label, connections, headers in (("hit", 1, None), ("miss path", 1, OFF), ("hit", 32, None),
                                                ("miss path", 32, OFF)):
                result = wrk.run(target, body, connections, args.seconds, WORK, headers=headers)
                rows.append((mode, label, connections, result))
            direct = wrk.run(f"http://127.0.0.1:{upstream}/{path}/v1/chat/completions", body, 32, args.seconds, WORK)
            rows.append((mode, "direct (nginx)", 32, direct))
    print(f"machine: {platform.node()} · {os.cpu_count()} cores · python {platform.python_version()} · "
          f"wrk {args.seconds} s per cell")
    print()
    print("| mode | path | c | req/s | p50 (ms) | p99 (ms) | errors |")
    print("|---|---|---|---|---|---|---|")
    for mode, label, c, r in rows:
        print(f"| {mode} | {label} | {c} | {r.requests_per_s:,.0f} | {r.p50_ms:.3f} | {r.p99_ms:.3f} | {r.errors} |")
    print()
    for mode in ("json", "stream"):
        hit = next(r for m, label, c, r in rows if m == mode and label == "hit" and c == 32)
        miss = next(r for m, label, c, r in rows if m == mode and label == "miss path" and c == 32)
        print(f"{mode}: hits ÷ miss path at c32: {hit.requests_per_s / miss.requests_per_s:.2f}× req/s")


if __name__ == "__main__":
    main()
