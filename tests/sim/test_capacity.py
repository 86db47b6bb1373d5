"""Rate limits that are really capacity: RPM/TPM per key, the overload bound, replicas, several models."""

from __future__ import annotations

import concurrent.futures
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager

import openai
import pytest

from firsttoken.sim.engine import Sequence
from firsttoken.sim.replica import Replica
from support.sim_region import region_on_loopback
from support.waiting import wait_until

from .test_server import server_timing

MESSAGES = [{"role": "user", "content": "hello"}]


def client_for(port: int, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0)


def test_rpm_per_key_answers_429_with_retry_after() -> None:
    with region_on_loopback(models=["llama-3.2-1b"], rpm=2) as (port, _):
        alice, bob = client_for(port, "alice"), client_for(port, "bob")
        started = time.monotonic()  # the region's loop runs on this clock
        first = alice.chat.completions.with_raw_response.create(model="llama-3.2-1b", messages=MESSAGES,
                                                                 max_tokens=1)
        assert first.headers["x-ratelimit-limit-requests"] == "2"
        assert first.headers["x-ratelimit-remaining-requests"] == "1"
        alice.chat.completions.create(model="llama-3.2-1b", messages=MESSAGES, max_tokens=1)
        with pytest.raises(openai.RateLimitError) as refused:
            alice.chat.completions.create(model="llama-3.2-1b", messages=MESSAGES, max_tokens=1)
        took = time.monotonic() - started
        # two a minute refill one every 30 s: the next one is 30 s away, less the time the three took
        assert 30 - took <= int(refused.value.response.headers["retry-after"]) <= 30
        assert refused.value.body["code"] == "rate_limit_exceeded" and "2 requests per minute" in refused.value.message
        bob.chat.completions.create(model="llama-3.2-1b", messages=MESSAGES, max_tokens=1)  # keys are separate


def test_tpm_counts_prompt_and_max_tokens() -> None:
    with region_on_loopback(models=["llama-3.2-1b"], tpm=600) as (port, _):
        client = client_for(port, "k")
        started = time.monotonic()
        client.chat.completions.create(model="llama-3.2-1b", messages=MESSAGES, max_tokens=400)  # 5 + 400
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="llama-3.2-1b", messages=MESSAGES, max_tokens=300)
        took = time.monotonic() - started
        # 195 tokens left; 305 asked: 110 more at 10 tokens a second, less what refilled meanwhile (11 s
        # whenever the two took under a second)
        assert math.ceil(11 - took) <= int(refused.value.response.headers["retry-after"]) <= 11
        with pytest.raises(openai.RateLimitError) as too_large:
            client.chat.completions.create(model="llama-3.2-1b", messages=MESSAGES, max_tokens=1000)
        assert too_large.value.body["type"] == "tokens"
        assert "Request too large" in too_large.value.message and "retry-after" not in too_large.value.response.headers


def _long_request(port: int) -> dict[str, float]:
    raw = client_for(port, "k").chat.completions.with_raw_response.create(
        model="llama-3.1-8b", messages=MESSAGES, max_tokens=40)
    return server_timing(raw.headers["server-timing"])


@contextmanager
def _holding_the_batch(port: int, replica: Replica) -> Iterator[tuple[Sequence, dict[str, float]]]:
    """A stream that keeps the replica's batch of one busy until the block ends and its client leaves (a
    barrier the test controls, whatever this machine's speed); yields its sequence and Server-Timing."""
    with client_for(port, "k").chat.completions.with_streaming_response.create(
            model="llama-3.1-8b", messages=MESSAGES, max_tokens=4000, stream=True,
            extra_body={"ignore_eos": True}) as held:  # half a minute of decode, unless it is let go
        [sequence] = replica.engine.running  # its headers come with its first token: it runs
        yield sequence, server_timing(held.headers["server-timing"])


def test_a_full_batch_queues_and_a_full_queue_is_refused() -> None:
    with region_on_loopback(max_batch=1, max_queue=1) as (port, region):
        replica = region.replicas["llama-3.1-8b"][0]
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            with _holding_the_batch(port, replica) as (first, running):
                waiting = pool.submit(_long_request, port)
                [second] = wait_until(lambda: list(replica.engine.waiting), "the second request queued")
                with pytest.raises(openai.InternalServerError) as refused:
                    client_for(port, "k").chat.completions.create(model="llama-3.1-8b", messages=MESSAGES,
                                                                  max_tokens=1)
                assert refused.value.status_code == 503 and "overloaded" in refused.value.message
                assert refused.value.response.headers["retry-after"] == "1"
                left = time.monotonic()  # the region's loop clock: the first's client leaves after this
            queued = waiting.result()
        # The first was admitted before the second arrived, behind nobody; the second waited through the
        # first's decode, until its client left, and its Server-Timing says so.
        assert first.admitted_at is not None and first.admitted_at <= second.arrived_at
        assert first.first_token_at is not None and second.admitted_at is not None
        assert second.admitted_at >= max(left, first.first_token_at)
        assert queued["queue"] == pytest.approx((second.admitted_at - second.arrived_at) * 1000, abs=0.01)
        assert running["queue"] < queued["queue"]


def test_replicas_share_the_load() -> None:
    with region_on_loopback(max_batch=1, replicas=2) as (port, region):
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda _: _long_request(port), range(2)))
        replicas = region.replicas["llama-3.1-8b"]
        # one each, nobody waits: each replica ran one request's 40 steps (a prefill and 39 decodes), where
        # one replica would have run both one after the other
        assert [r.lateness.events for r in replicas] == [40, 40]
        assert [r.engine.kv_used for r in replicas] == [0, 0]


def test_several_models_and_overload_as_429() -> None:
    with region_on_loopback(models=["llama-3.1-8b", "qwen2.5-7b"], max_batch=1, max_queue=1,
                            overload_status=429) as (port, region):
        client = client_for(port, "k")
        assert [m.id for m in client.models.list()] == ["llama-3.1-8b", "qwen2.5-7b"]
        replica = region.replicas["llama-3.1-8b"][0]
        with concurrent.futures.ThreadPoolExecutor(1) as pool, _holding_the_batch(port, replica):
            pool.submit(_long_request, port)  # one runs (a batch of one), one waits: the queue is at its bound
            wait_until(lambda: replica.engine.backlog() >= 1, "the second request queued")
            with pytest.raises(openai.RateLimitError) as refused:
                client.chat.completions.create(model="llama-3.1-8b", messages=MESSAGES, max_tokens=1)
            assert "overloaded" in refused.value.message
            client.chat.completions.create(model="qwen2.5-7b", messages=MESSAGES, max_tokens=1)  # its own GPUs
