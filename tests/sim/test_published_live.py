"""`firsttoken sim --model llama-3.3-70b --gpu h100 --tp 2 --precision fp8`, the real command, measured
by the real openai SDK: NIM's concurrency-1 row live, a burst that grows the queue, and a cold start.
(The concurrency-25/50/100 rows are reproduced in virtual time in test_engine.py: closed-loop steady
state takes minutes of real time.)"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from firsttoken.config import sim_settings
from support.gateway_process import free_port
from support.waiting import wait_until

PUBLISHED_C1_TTFT_MS, PUBLISHED_C1_ITL_MS = 406.8, 18.58  # shared/reference/published_numbers.md
PROMPT = "word " * 4995  # with a number in front, 5 000 tokens under the region's tokenizer, as in the published
# run; the number makes every prompt its own, as a benchmark's random prompts are (nothing for a prefix cache)


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "firsttoken", "sim", "--port", str(port),
                                "--model", "llama-3.3-70b", "--gpu", "h100", "--tp", "2", "--precision", "fp8"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/v1"
    wait_until(lambda: answers(url + "/models"), "firsttoken sim to answer")
    yield url
    process.terminate()
    process.wait(10)


async def stream_once(client: openai.AsyncOpenAI, prompt: str, max_tokens: int) -> tuple[float, list[float]]:
    started = time.perf_counter()
    arrivals = []
    stream = await client.chat.completions.create(model="llama-3.3-70b", messages=[{"role": "user", "content": prompt}],
                                                  max_tokens=max_tokens, stream=True,
                                                  extra_body={"ignore_eos": True})  # as benchmark harnesses send
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.perf_counter())
    return arrivals[0] - started, [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]


def test_concurrency_one_matches_nim(sim_url: str) -> None:
    async def run() -> tuple[float, float]:
        async with openai.AsyncOpenAI(base_url=sim_url, api_key="k", max_retries=0) as client:
            await client.models.list()  # a warm connection, as a benchmark client keeps
            ttfts, itls = [], []
            for i in range(2):
                ttft, gaps = await stream_once(client, f"{i} " + PROMPT, 40)
                ttfts.append(ttft)
                itls += gaps
            return min(ttfts) * 1000, statistics.median(itls) * 1000

    ttft_ms, itl_ms = asyncio.run(run())
    assert ttft_ms == pytest.approx(PUBLISHED_C1_TTFT_MS, rel=0.20)
    assert itl_ms == pytest.approx(PUBLISHED_C1_ITL_MS, rel=0.20)


def test_a_burst_grows_the_queue(sim_url: str) -> None:
    async def run() -> list[float]:
        async with openai.AsyncOpenAI(base_url=sim_url, api_key="k", max_retries=0) as client:
            async def one(i: int) -> float:
                raw = await client.chat.completions.with_raw_response.create(
                    model="llama-3.3-70b", messages=[{"role": "user", "content": f"{i} " + PROMPT}], max_tokens=2,
                    extra_body={"ignore_eos": True})
                timing = dict(p.strip().split(";dur=") for p in raw.headers["server-timing"].split(","))
                return float(timing["queue"]) + float(timing["prefill"])

            return list(await asyncio.gather(*(one(i) for i in range(8))))

    waits = sorted(asyncio.run(run()))
    # eight 5 000-token prompts share 4 096-token prefill steps: each waits for the ones ahead of it, and
    # the last for all eight prefills
    assert all(b > a for a, b in zip(waits, waits[1:], strict=False))
    one_prefill_ms = sim_settings({"models": ["llama-3.3-70b"], "tp": 2, "precision": "fp8"}).deployments[
        "llama-3.3-70b"].prefill_s(5000) * 1000
    assert waits[-1] == pytest.approx(8 * one_prefill_ms, rel=0.25)
    assert waits[-1] > 4 * waits[0]
