"""The time a serving stack spends on a request outside its engine, measured on the simulated region, and
what a gateway in front adds: the figures the plan's `firsttoken-sim` stack and its gateway use
(src/firsttoken/plan/tables/serving_stacks.csv, plan/simulate.py's GATEWAY_FORWARD_S).

One region (`firsttoken sim`, an 8B model on an H100) and one gateway in front of it, both on loopback, no
distance. One request at a time, streamed, prompts of several lengths in a shuffled order, each its own
first word so that no prefix is shared; an answer of a few tokens. For each request the region's own
Server-Timing says how long its engine took to the first token (queue, cold, prefill); what the client
waited beyond that is the stack's front end: the client's and the region's HTTP, parsing the request,
counting its tokens, building the answer, the first chunk's write. A straight line through the medians per
length gives the front end as a time per request and a time per thousand prompt tokens. The same requests
through the gateway give what the gateway adds.

    .venv/bin/python bench/serving_front.py [--per-length 30]
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import yaml
from fixtures import engine_ms, free_port, wait_for

LENGTHS = (100, 500, 1000, 2000, 4000, 8000)  # prompt tokens
ANSWER = 4


def _one(client: httpx.Client, base: str, n: int, prompt: int) -> tuple[float, float]:
    """(TTFT, the engine's part of it) in ms for one streamed request of `prompt` tokens."""
    words = " ".join([f"r{n}"] + ["w"] * (prompt - 5))  # four framing tokens and its words, as in lab/replay
    body = {"model": "llama-3.1-8b", "stream": True, "max_tokens": ANSWER, "ignore_eos": True,
            "messages": [{"role": "user", "content": words}]}
    began = time.perf_counter()
    first = None
    with client.stream("POST", base + "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        engine = engine_ms(response.headers.get("server-timing"))
        for line in response.iter_lines():
            if first is None and '"content":"' in line and '"content":""' not in line:
                first = time.perf_counter()
    assert first is not None
    return (first - began) * 1000, engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-length", type=int, default=30, help="requests of each prompt length, each path")
    per_length = parser.parse_args().per_length
    work = Path(tempfile.mkdtemp(prefix="serving-front-"))
    region_port, gateway_port = free_port(), free_port()
    region = subprocess.Popen([sys.executable, "-m", "firsttoken", "sim", "--host", "127.0.0.1", "--port",
                               str(region_port), "--model", "llama-3.1-8b", "--gpu", "h100"],
                              stdout=subprocess.DEVNULL, stderr=(work / "sim.log").open("w"))
    config = work / "firsttoken.yaml"
    config.write_text(yaml.safe_dump({"cache": False, "journeys": {"log": None}, "upstreams": {"region": {
        "url": f"http://127.0.0.1:{region_port}/v1", "pool": {"warm": 4}}}}))
    gateway = subprocess.Popen([sys.executable, "-m", "firsttoken", "serve", "--config", str(config), "--port",
                                str(gateway_port)], stdout=subprocess.DEVNULL, stderr=(work / "gateway.log").open("w"))
    try:
        wait_for(f"http://127.0.0.1:{region_port}/v1/models")
        wait_for(f"http://127.0.0.1:{gateway_port}/v1/models")
        paths = {"region": f"http://127.0.0.1:{region_port}", "gateway": f"http://127.0.0.1:{gateway_port}"}
        order = [(path, length) for path in paths for length in LENGTHS for _ in range(per_length)]
        random.Random(7).shuffle(order)
        ttft: dict[tuple[str, int], list[float]] = {}
        front: dict[tuple[str, int], list[float]] = {}
        with httpx.Client(timeout=60) as client:
            for n, (path, length) in enumerate([(p, 100) for p in paths] * 5 + order):  # a warm-up first
                took, engine = _one(client, paths[path], n, length)
                if n >= 10:
                    ttft.setdefault((path, length), []).append(took)
                    front.setdefault((path, length), []).append(took - engine)
    finally:
        for process in (gateway, region):
            process.terminate()
            process.wait(10)
    print("| prompt tokens | region TTFT p50 (ms) | its engine's part | region front end p50 (ms) | "
          "via the gateway TTFT p50 (ms) | the gateway adds (ms) |")
    print("|---|---|---|---|---|---|")
    fronts, added = [], []
    for length in LENGTHS:
        direct, via = statistics.median(ttft["region", length]), statistics.median(ttft["gateway", length])
        own = statistics.median(front["region", length])
        fronts.append(own)
        added.append(via - direct)
        print(f"| {length} | {direct:.2f} | {direct - own:.2f} | {own:.2f} | {via:.2f} | {via - direct:+.2f} |")
    per_1k, per_request = np.polyfit(np.array(LENGTHS) / 1000, fronts, 1)
    gateway_per_1k, gateway_per_request = np.polyfit(np.array(LENGTHS) / 1000, added, 1)
    print(f"\nthe region's front end: {per_request:.2f} ms a request + {per_1k:.3f} ms per 1 000 prompt tokens")
    print(f"the gateway adds: {gateway_per_request:.2f} ms a request + {gateway_per_1k:.3f} ms per 1 000 prompt "
          "tokens")


if __name__ == "__main__":
    main()
