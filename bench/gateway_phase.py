"""What the gateway's own phase costs a request it cannot answer from the edge cache, by prompt length: the
same misses through a gateway with the cache off, with the exact cache only, and with the cache as shipped
(exact and semantic), against an upstream that answers one static answer after --upstream-ms (150: Lagos to
Virginia, bench/far_upstream.py; 0: nginx, at once), in one run.

    .venv/bin/python bench/gateway_phase.py [--requests 60] [--concurrency 1,32] [--caches off,exact,shipped,static]
                                            [--upstream-ms 150] [--words 10,150,600,2000] [--agent-kb 13,212,1024]

Every default it depends on: the gateway's `cache:` is the variable (`false`; `{semantic: false}`; `{}`, the
shipped default: exact and semantic with MiniLM int8 on one worker thread, `semantic_wait_ms` 0 (the
lookup's head start, after which the request leaves and the lookup races the upstream), `race_budget` 0.1;
and `static`: the shipped static embedding, computed on the event loop, at similarity 0.80), one worker,
the client in this process (asyncio + httpx) sharing the machine's cores with the gateway. The figures are
the requests a second the client saw (with --upstream-ms 0, what one worker can relay) and
the gateway's own `Server-Timing` (`gateway;dur`, of which `cache;dur`): from the request's arrival to its
leaving for the upstream. Every request is a miss: its last user message is words drawn at random (from
the embedding model's own vocabulary, so that each is one token or two) and never asked before, in one
conversation's context, so that the semantic index has prompts of that scope to search. Agent turns are a
conversation of 20 tools and past turns, 13 KB to 1 MB, ending with a 40-word user message. After the
misses, one of them is asked again at c = 1: as it was (an exact hit), after "Please: " (a near copy, found
by a hash: cache/near_copies.py), with "the" added after its third word, and with "finally" there instead
(paraphrases: for 100 words or more a small edit, judged by what changed, cache/small_edits.py, by the
guards alone for a filler and with the model reading the change's window for a word; for fewer, by the
full lookup; either way served when the lookup, racing the upstream, ends first).
A benchmark, run by hand; CI never runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
import fixtures  # noqa: E402
import gateway_overhead  # noqa: E402

from firsttoken.cache.embed import DEFAULT_MODEL, model_files  # noqa: E402
from firsttoken.journey.server_timing import parse_server_timing  # noqa: E402

CACHES: dict[str, object] = {"off": False, "exact": {"semantic": False}, "shipped": {},
                             "static": {"embedding": "wordllama-l2-supercat", "similarity": 0.80}}
WORDS = (10, 150, 600, 2000)
AGENT_KB = (13, 212, 1024)
SYSTEM = "You are a helpful assistant."
AGAIN = ("exact hit", "near copy", "a filler added", "a word added")  # how the first miss is asked again
ADMIN_KEY = "bench-admin-key-0001"  # /metrics, for the semantic cache's counts


def vocabulary() -> list[str]:
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(str(model_files(DEFAULT_MODEL).tokenizer)).get_vocab()
    return sorted(w for w in vocab if w.isalpha() and w.isascii() and len(w) >= 4)


def chat(messages: list[dict], tools: list[dict] | None = None) -> dict:
    return {"model": "bench", "messages": messages, **({"tools": tools} if tools else {})}


def agent_history(kb: int, rng: random.Random, words: list[str]) -> tuple[list[dict], list[dict]]:
    """20 tools and past turns (a tool call and its result each) up to about `kb` KB."""
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": " ".join(rng.choices(words, k=30)),
                                               "parameters": {"type": "object", "properties": {
                                                   "path": {"type": "string"}, "limit": {"type": "integer"}}}}}
             for i in range(20)]
    messages: list[dict] = [{"role": "system", "content": SYSTEM}]
    while len(json.dumps(messages)) + len(json.dumps(tools)) < kb * 1024:
        call = f"call_{len(messages)}"
        messages += [{"role": "user", "content": " ".join(rng.choices(words, k=40))},
                     {"role": "assistant", "content": None, "tool_calls": [{"id": call, "type": "function",
                      "function": {"name": "tool_1", "arguments": '{"path": "src/app.py"}'}}]},
                     {"role": "tool", "tool_call_id": call, "content": " ".join(rng.choices(words, k=600))}]
    return messages, tools


def shapes(words: list[str], lengths: Sequence[int] = WORDS, agent_kb: Sequence[int] = AGENT_KB, seed: int = 7
           ) -> Iterator[tuple[str, list[dict], list[dict] | None, int]]:
    """(name, context messages, tools, words in the last user message)."""
    rng = random.Random(seed)
    for count in lengths:
        yield f"{count} words", [{"role": "system", "content": SYSTEM}], None, count
    for kb in agent_kb:
        messages, tools = agent_history(kb, rng, words)
        yield f"agent turn {kb} KB", messages, tools, 40


async def ask(client: httpx.AsyncClient, body: dict) -> tuple[float, float, str, float]:
    """The gateway's phase and its cache lookup (ms, its Server-Timing), the cache's word, and the whole
    answer's time at the client (ms: what a hit costs, having no upstream to leave for)."""
    started = time.perf_counter()
    response = await client.post("/v1/chat/completions", json=body)
    response.raise_for_status()
    took = (time.perf_counter() - started) * 1000
    timing = parse_server_timing(response.headers.get("server-timing"))
    return timing["gateway"], timing["cache"], response.headers.get("x-firsttoken-cache", ""), took


async def measure(url: str, pid: int, context: list[dict], tools: list[dict] | None, count: int, requests: int,
                  concurrency: int, rng: random.Random, words: list[str]) -> dict[str, object]:
    """Misses at `concurrency`, then (at c = 1) the first of them again, as a near copy and reworded."""
    bodies = [chat([*context, {"role": "user", "content": " ".join(rng.choices(words, k=count))}], tools)
              for _ in range(requests)]
    headers = {"authorization": f"Bearer {gateway_overhead.CLIENT_KEY}"}
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120, limits=limits) as client:
        await ask(client, chat([*context, {"role": "user", "content": "warm up"}], tools))
        queue = iter(bodies)
        seen: list[tuple[float, float, str, float]] = []

        async def worker() -> None:
            for body in queue:
                seen.append(await ask(client, body))

        started, cpu = time.perf_counter(), cpu_seconds(pid)
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        throughput = len(seen) / (time.perf_counter() - started)
        cpu_ms = (cpu_seconds(pid) - cpu) * 1000 / len(seen)
        again = await ask(client, bodies[0])
        first = bodies[0]["messages"][-1]["content"]
        near = await ask(client, chat([*context, {"role": "user", "content": "Please: " + first}], tools))
        split = first.split(" ")
        added = []
        for word in ("the", "finally"):
            edited = " ".join([*split[:3], word, *split[3:]])
            added.append(await ask(client, chat([*context, {"role": "user", "content": edited}], tools)))
    gateway, cache = [s[0] for s in seen], [s[1] for s in seen]
    return {"outcomes": sorted({s[2] for s in seen}), "gateway": quantiles(gateway), "cache": quantiles(cache),
            "throughput": throughput, "cpu": cpu_ms, **dict(zip(AGAIN, (again, near, *added), strict=True))}


def quantiles(values: list[float]) -> tuple[float, float]:
    """p50 and p99 (the largest, below 100 samples)."""
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=60, help="misses per cell (default 60)")
    parser.add_argument("--concurrency", default="1,32", help="comma-separated (default 1,32)")
    parser.add_argument("--caches", default=",".join(CACHES), help=f"comma-separated (default {','.join(CACHES)})")
    parser.add_argument("--upstream-ms", type=float, default=150.0, help="the upstream's first byte (default 150)")
    parser.add_argument("--words", default=",".join(map(str, WORDS)),
                        help=f"the questions' lengths in words, comma-separated (default {','.join(map(str, WORDS))})")
    parser.add_argument("--agent-kb", default=",".join(map(str, AGENT_KB)),
                        help=f"the agent turns' sizes in KB, comma-separated, or none "
                             f"(default {','.join(map(str, AGENT_KB))})")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    words = vocabulary()
    gateway_overhead.WORK.mkdir(parents=True, exist_ok=True)
    print(f"# {platform.node()}, {platform.python_version()}, {args.requests} misses a cell, c = {levels}, "
          f"upstream's first byte {args.upstream_ms:g} ms")
    print("| cache | prompt | c | gateway p50 | gateway p99 | cache p50 | cache p99 | requests/s "
          "| gateway CPU a request (ms) | outcomes |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    hits: list[str] = []
    semantic: dict[str, str] = {}
    with ExitStack() as stack:
        upstream = fixtures.free_port()
        if args.upstream_ms > 0:
            stack.enter_context(gateway_overhead.process(
                [sys.executable, str(Path(__file__).parent / "far_upstream.py"), "--port", str(upstream),
                 "--first-byte-ms", str(args.upstream_ms)], gateway_overhead.WORK / "far-upstream.log"))
            fixtures.wait_for(f"http://127.0.0.1:{upstream}/json/v1/models")
        else:
            stack.enter_context(gateway_overhead.nginx(
                fixtures.upstream_nginx_conf(str(gateway_overhead.WORK), upstream), "phase-upstream"))
        for name in args.caches.split(","):
            cache = CACHES[name]
            if isinstance(cache, dict):  # a file of its own, new each run: every request must be a miss
                path = gateway_overhead.WORK / f"phase-cache-{name}.db"
                for old in gateway_overhead.WORK.glob(f"{path.name}*"):
                    old.unlink()
                cache = {**cache, "path": str(path)}
            with gateway_overhead.firsttoken_process(upstream, 1, extra={"cache": cache, "admin_key": ADMIN_KEY}
                                                     ) as (url, gateway):
                rng = random.Random(11)
                for shape, context, tools, count in shapes(words, _counts(args.words), _counts(args.agent_kb)):
                    for concurrency in levels:
                        cell = asyncio.run(measure(url, gateway.pid, context, tools, count, args.requests,
                                                   concurrency, rng, words))
                        (g50, g99), (c50, c99) = cell["gateway"], cell["cache"]  # type: ignore[misc]
                        print(f"| {name} | {shape} | {concurrency} | {g50:.2f} | {g99:.2f} | {c50:.2f} | {c99:.2f} "
                              f"| {cell['throughput']:.0f} | {cell['cpu']:.2f} | {', '.join(cell['outcomes'])} |",  # type: ignore[arg-type]
                              flush=True)
                        if concurrency == levels[0] and name != "off":
                            for what in AGAIN:
                                _, c, outcome, took = cell[what]  # type: ignore[misc]
                                hits.append(f"| {name} | {shape} | {what} | {outcome} | {c:.2f} | {took:.2f} |")
                semantic[name] = semantic_counts(url)
    print("\n| cache | prompt | asked again | answered | cache (ms) | whole answer at the client (ms) |\n"
          "|---|---|---|---|---|---|")
    print("\n".join(hits))
    print("\nThe semantic cache's own counts over each gateway's run (its /metrics):")
    for name, counts in semantic.items():
        print(f"- {name}: {counts or 'none'}")


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) a process has used, from /proc: its threads' too (the embedding worker's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _counts(listed: str) -> list[int]:
    return [] if listed in ("", "none") else [int(n) for n in listed.split(",")]


def semantic_counts(url: str) -> str:
    """The semantic lookups' counters (lookups skipped, prompts embedded, races by how they ended)."""
    scrape = httpx.get(url + "/metrics", headers={"authorization": f"Bearer {ADMIN_KEY}"}).text
    return ", ".join(line.removeprefix("firsttoken_semantic_") for line in scrape.splitlines()
                     if line.startswith("firsttoken_semantic_"))


if __name__ == "__main__":
    main()
