"""The edge cache's speed through the gateway: an exact hit and a semantic hit end to end (p50, p99), the
semantic hit at 1, 16 and 64 connections, what a semantic lookup costs a miss while the embedding
model is busy, and requests/s on exact hits against the gateway's miss path at 32, both modes, in one run.

    .venv/bin/python bench/cache_speed.py [--seconds 5] [--semantic-wait-ms 15]

One gateway (1 worker, SQLite cache, semantic matching on) in front of the static nginx upstream of the
overhead benchmark. Every wrk request of a cell is the same one:
- exact hit: after the first request, each is a hit; the miss path is the same requests with
  `x-firsttoken-cache: off` (straight to the upstream, nothing read or kept);
- semantic hit: a paraphrase of a stored question, sent with `Cache-Control: no-store` (so a lookup
  skipped under load goes upstream and keeps nothing: the next request embeds and searches again). Every
  request embeds its question: nothing memoises vectors. The share of lookups skipped because the
  embedding worker was too far behind is read from /metrics;
- miss while busy: 16 connections keep asking semantic hits in the background while one asks a question
  nothing stored resembles, with the cache on (`no-store`: its lookup runs, and is skipped or waits) and
  with it off; the difference is what the lookup costs a miss.
"Direct" is nginx itself, for scale. Run by hand; CI never runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import fixtures  # noqa: E402
import wrk  # noqa: E402
from gateway_overhead import WORK, firsttoken_process, nginx  # noqa: E402

OFF = {"x-firsttoken-cache": "off"}
NO_STORE = {"Cache-Control": "no-store"}
ADMIN_KEY = "bench-admin-key-for-metrics"  # /metrics shows every tenant's traffic
STORED, PARAPHRASE, UNRELATED = "How do I cook beans?", "What is the way to cook beans?", "Write a poem about the sea."


def _cache_state(url: str, body: str) -> str:
    request = urllib.request.Request(url, body.encode(), {"content-type": "application/json",
                                                          "authorization": f"Bearer {wrk.CLIENT_KEY}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
        return response.headers.get("x-firsttoken-cache", "")


def _skipped(base: str) -> float:
    request = urllib.request.Request(f"{base}/metrics", headers={"authorization": f"Bearer {ADMIN_KEY}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read().decode()
    match = re.search(r"^firsttoken_semantic_lookups_skipped_total ([\d.e+]+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


@contextmanager
def _gateway(upstream: int, wait_ms: float) -> Iterator[str]:
    """A gateway with an empty SQLite cache and semantic matching on; its base URL."""
    cache_file = WORK / "cache-speed.db"
    cache_file.unlink(missing_ok=True)
    with firsttoken_process(upstream, 1, None, {"cache": {"backend": "sqlite", "path": str(cache_file),
                                                          "semantic": True, "semantic_wait_ms": wait_ms},
                                                "journeys": {"log": None}, "admin_key": ADMIN_KEY}) as (url, _):
        yield url


async def _lookup_cost_while_busy(samples: int = 2000) -> tuple[float, float, float, float, float]:
    """In process: EdgeCache.lookup() for a miss (a question nothing stored resembles) while the embedding
    worker computes a batch of 64, against the same lookup with semantic matching off: p50 and p99 of
    each, in ms, and the share of the busy lookups that were skipped."""
    from firsttoken.cache.edge import EdgeCache
    from firsttoken.config import Cache

    # The head start the gateway part is given (before the lookup raced the upstream, every lookup waited
    # this long at most); and one prompt kept in the scope, so that every lookup below searches it (a scope
    # with nothing stored costs no embedding at all).
    cache = EdgeCache(Cache(backend="memory", semantic_wait_ms=15))
    await cache.start()
    assert cache.encoder is not None
    stored = {"model": "m", "messages": [{"role": "user", "content": "How do I cook beans?"}]}
    kept = await cache.lookup([], "tenant", "m", ["u/m"], stored)
    assert kept is not None
    cache.keep(kept, "json", b"{}", "u/m")
    body = {"model": "m", "messages": [{"role": "user", "content": UNRELATED}]}

    async def timed() -> float:
        started = time.perf_counter()
        await cache.lookup([], "tenant", "m", ["u/m"], body)
        return (time.perf_counter() - started) * 1000

    busy, skipped_before = [], cache.encoder.skipped
    while len(busy) < samples:
        budget, cache.encoder.max_wait_s = cache.encoder.max_wait_s, 60.0  # the load itself is never skipped
        load = [asyncio.ensure_future(cache.encoder.encode([f"background question {n}"])) for n in range(65)]
        await asyncio.sleep(0.05)  # the worker is into the batch of 64 (the first prompt went alone)
        cache.encoder.max_wait_s = budget
        busy += [await timed() for _ in range(50)]
        await asyncio.gather(*load)
    skipped = (cache.encoder.skipped - skipped_before) / len(busy)
    cache.semantic = None  # the same lookup with semantic matching off
    off = [await timed() for _ in range(samples)]
    await cache.close()

    def p99(values: list[float]) -> float:
        return statistics.quantiles(values, n=100)[98]

    return statistics.median(busy), p99(busy), statistics.median(off), p99(off), skipped


def _body(model: str, stream: bool, question: str) -> str:
    return json.dumps({"model": model, "stream": stream, "messages": [{"role": "user", "content": question}]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--semantic-wait-ms", type=float, default=15,
                        help="the gateway's semantic_wait_ms (15: the lookup's longest wait before it raced the "
                             "upstream, now a head start; a large one skips no lookup)")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "background").mkdir(exist_ok=True)
    upstream = fixtures.free_port()
    rows, skipped = [], {}
    with ExitStack() as stack:
        stack.enter_context(nginx(fixtures.upstream_nginx_conf(str(WORK), upstream), "upstream"))
        base = stack.enter_context(_gateway(upstream, args.semantic_wait_ms))
        target = f"{base}/v1/chat/completions"
        for mode, model in (("json", "bench"), ("stream", "bench-sse")):
            stream = mode == "stream"
            wrk.run(target, _body(model, stream, STORED), 1, 1, WORK)
            asked = _body(model, stream, PARAPHRASE)
            if not _cache_state(target, asked).startswith("semantic-hit"):
                raise SystemExit("the paraphrase was not a semantic hit")
            for connections in (1, 16, 64):
                before = _skipped(base)
                result = wrk.run(target, asked, connections, args.seconds, WORK, headers=NO_STORE)
                rows.append((mode, "semantic hit", connections, result))
                asked_in_all = result.requests_per_s * args.seconds
                skipped[(mode, connections)] = (_skipped(base) - before) / max(asked_in_all, 1)
        busy = threading.Thread(target=wrk.run, args=(target, _body("bench", False, PARAPHRASE), 16,
                                                      3 * args.seconds + 2, WORK / "background"),
                                kwargs={"headers": NO_STORE})
        busy.start()
        unrelated = _body("bench", False, UNRELATED)
        for label, headers in (("miss, encoder busy: lookup", NO_STORE), ("miss, encoder busy: cache off", OFF),
                               ("miss, encoder busy: lookup", NO_STORE)):
            rows.append(("json", label, 1, wrk.run(target, unrelated, 1, args.seconds, WORK, headers=headers)))
        busy.join()
        for mode, model, path in (("json", "bench", "json"), ("stream", "bench-sse", "sse")):
            body = fixtures.request_body(model, mode == "stream")
            wrk.run(target, body, 1, 1, WORK)  # the first request is the miss that fills the cache
            for label, connections, headers in (("hit", 1, None), ("miss path", 1, OFF), ("hit", 32, None),
                                                ("miss path", 32, OFF)):
                result = wrk.run(target, body, connections, args.seconds, WORK, headers=headers)
                rows.append((mode, label, connections, result))
            direct = wrk.run(f"http://127.0.0.1:{upstream}/{path}/v1/chat/completions", body, 32, args.seconds, WORK)
            rows.append((mode, "direct (nginx)", 32, direct))
    busy_p50, busy_p99, off_p50, off_p99, skipped_share = asyncio.run(_lookup_cost_while_busy())
    print(f"machine: {platform.node()} · {os.cpu_count()} cores · python {platform.python_version()} · "
          f"wrk {args.seconds} s per cell")
    print()
    print("| mode | path | c | req/s | p50 (ms) | p99 (ms) | errors |")
    print("|---|---|---|---|---|---|---|")
    for mode, label, c, r in rows:
        share = skipped.get((mode, c)) if label == "semantic hit" else None
        note = f" ({share:.0%} of lookups skipped)" if share else ""
        print(f"| {mode} | {label}{note} | {c} | {r.requests_per_s:,.0f} | {r.p50_ms:.3f} | {r.p99_ms:.3f} | "
              f"{r.errors} |")
    print()
    print(f"In process, EdgeCache.lookup() on a miss while the embedding worker computes a batch of 64: p50 "
          f"{busy_p50:.3f} ms, p99 {busy_p99:.3f} ms ({skipped_share:.0%} skipped); with semantic matching off: p50 "
          f"{off_p50:.3f} ms, p99 {off_p99:.3f} ms")
    for mode in ("json", "stream"):
        hit = next(r for m, label, c, r in rows if m == mode and label == "hit" and c == 32)
        miss = next(r for m, label, c, r in rows if m == mode and label == "miss path" and c == 32)
        print(f"{mode}: hits ÷ miss path at c32: {hit.requests_per_s / miss.requests_per_s:.2f}× req/s")


if __name__ == "__main__":
    main()
