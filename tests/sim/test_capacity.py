"""Rate limits that are really capacity: RPM/TPM per key, the overload bound, replicas, several models."""

from __future__ import annotations

import concurrent.futures
import time

import openai
import pytest

from support.sim_region import region_on_loopback

from .test_server import server_timing

MESSAGES = [{"role": "user", "content": "hello"}]


def client_for(port: int, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0)


def test_rpm_per_key_answers_429_with_retry_after() -> None:
    with region_on_loopback(models=["llama-3.2-1b"], rpm=2) as (port, _):
        alice, bob = client_for(port, "alice"), client_for(port, "bob")
        first = alice.chat.completions.with_raw_response.create(model="llama-3.2-1b", messages=MESSAGES,
                                                                 max_tokens=1)
        assert first.headers["x-ratelimit-limit-requests"] == "2"
        assert first.headers["x-ratelimit-remaining-requests"] == "1"
        alice.chat.completions.create(model="llama-3.2-1b", messages=MESSAGES, max_tokens=1)
        with pytest.raises(openai.RateLimitError) as refused:
            alice.chat.completions.create(model="llama-3.2-1b", messages=MESSAGES, max_tokens=1)
        # two a minute refill one every 30 s: the next one is 30 s away, less the time the two took
        assert 25 <= int(refused.value.response.headers["retry-after"]) <= 30
        assert refused.value.body["code"] == "rate_limit_exceeded" and "2 requests per minute" in refused.value.message
        bob.chat.completions.create(model="llama-3.2-1b", messages=MESSAGES, max_tokens=1)  # keys are separate


def test_tpm_counts_prompt_and_max_tokens() -> None:
    with region_on_loopback(models=["llama-3.2-1b"], tpm=600) as (port, _):
        client = client_for(port, "k")
        client.chat.completions.create(model="llama-3.2-1b", messages=MESSAGES, max_tokens=400)  # 5 + 400
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="llama-3.2-1b", messages=MESSAGES, max_tokens=300)
        # 195 tokens left; 305 asked: 110 more at 10 tokens a second
        assert int(refused.value.response.headers["retry-after"]) == 11
        with pytest.raises(openai.RateLimitError) as too_large:
            client.chat.completions.create(model="llama-3.2-1b", messages=MESSAGES, max_tokens=1000)
        assert too_large.value.body["type"] == "tokens"
        assert "Request too large" in too_large.value.message and "retry-after" not in too_large.value.response.headers


def _long_request(port: int) -> dict[str, float]:
    raw = client_for(port, "k").chat.completions.with_raw_response.create(
        model="llama-3.1-8b", messages=MESSAGES, max_tokens=40)
    return server_timing(raw.headers["server-timing"])


def test_a_full_batch_queues_and_a_full_queue_is_refused() -> None:
    with region_on_loopback(max_batch=1, max_queue=1) as (port, _):
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            running = pool.submit(_long_request, port)
            time.sleep(0.1)
            waiting = pool.submit(_long_request, port)
            time.sleep(0.1)
            with pytest.raises(openai.InternalServerError) as refused:
                client_for(port, "k").chat.completions.create(model="llama-3.1-8b", messages=MESSAGES, max_tokens=1)
            assert refused.value.status_code == 503 and "overloaded" in refused.value.message
            assert refused.value.response.headers["retry-after"] == "1"
            assert running.result()["queue"] < 2
            # It waited for the first request's 40 steps (about 250 ms), less the time it arrived after it:
            # 0.1 s, or more when a busy machine was slow to send the first.
            assert waiting.result()["queue"] > 50


def test_replicas_share_the_load() -> None:
    with region_on_loopback(max_batch=1, replicas=2) as (port, region):
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            timings = list(pool.map(lambda _: _long_request(port), range(2)))
        assert all(t["queue"] < 2 for t in timings)  # one each, nobody waits
        assert [r.engine.kv_used for r in region.replicas["llama-3.1-8b"]] == [0, 0]


def test_several_models_and_overload_as_429() -> None:
    with region_on_loopback(models=["llama-3.1-8b", "qwen2.5-7b"], max_batch=1, max_queue=1,
                            overload_status=429) as (port, region):
        client = client_for(port, "k")
        assert [m.id for m in client.models.list()] == ["llama-3.1-8b", "qwen2.5-7b"]
        replicas = region.replicas["llama-3.1-8b"]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            pool.submit(_long_request, port)
            pool.submit(_long_request, port)
            deadline = time.monotonic() + 10  # one runs (a batch of one), one waits: the queue is at its bound
            while sum(r.engine.backlog() for r in replicas) < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            with pytest.raises(openai.RateLimitError) as refused:
                client.chat.completions.create(model="llama-3.1-8b", messages=MESSAGES, max_tokens=1)
            assert "overloaded" in refused.value.message
            client.chat.completions.create(model="qwen2.5-7b", messages=MESSAGES, max_tokens=1)  # its own GPUs
