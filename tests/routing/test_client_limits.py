"""Client keys' requests and tokens per minute: in this process, in a real Redis shared by two gateways'
limiters (atomic: together they never admit more than the key's limit), and through the gateway with the
openai SDK (429, Retry-After, OpenAI's error shape)."""

from __future__ import annotations

import asyncio
import itertools
import time

import openai
import pytest

from firsttoken.config import ClientKey
from firsttoken.errors import GatewayError
from firsttoken.redis_guard import DEFAULT_POLICY, GuardPolicy
from firsttoken.routing.client_limits import ClientLimits, estimate_tokens
from firsttoken.routing.ratelimit import KeyLimits
from support.gateway_process import GatewayProcess
from support.limits import admitted, retry_after_since
from support.openai_upstream import UPSTREAM_KEY
from support.waiting import within

PREFIXES = itertools.count()
ASK = {"model": "chat", "messages": [{"role": "user", "content": "x" * 400}], "max_tokens": 100}


def key(name: str = "app", **limits: int) -> ClientKey:
    return ClientKey(name=name, key="client-key-" + name * 4, **limits)


def test_tokens_are_estimated_from_the_text_and_the_longest_answer() -> None:
    assert estimate_tokens(ASK) == 200
    assert estimate_tokens({"messages": [{"role": "user", "content": [{"type": "text", "text": "abcdefgh"}]}]}) == 2
    assert estimate_tokens({"input": ["abcd", "efgh"]}) == 2
    assert estimate_tokens({"messages": []}) == 1


def test_usage_corrects_the_estimate() -> None:
    limits = KeyLimits(tpm=1000)
    assert limits.take("k", 900, now=0.0) is None
    assert limits.take("k", 900, now=0.0) is not None
    limits.settle("k", charged=900, used=100, now=0.0)  # it used far less than it might have
    assert limits.take("k", 900, now=0.0) is None


async def test_a_key_over_its_rpm_gets_a_429_with_retry_after() -> None:
    limits = ClientLimits([key(rpm=2), key("free")])
    assert await limits.admit("free", ASK) is None  # no limits configured for it
    started = time.monotonic()
    await limits.admit("app", ASK)
    await limits.admit("app", ASK)
    with pytest.raises(GatewayError) as refused:
        await limits.admit("app", ASK)
    error = refused.value
    assert error.status == 429 and error.type == "requests" and error.code == "rate_limit_exceeded"
    assert int(error.headers["Retry-After"]) in retry_after_since(started, per_request_s=30)
    assert error.headers["x-ratelimit-limit-requests"] == "2"


async def test_a_request_larger_than_a_minute_of_tokens_is_told_so() -> None:
    with pytest.raises(GatewayError, match="needs more tokens"):
        await ClientLimits([key(tpm=100)]).admit("app", ASK)


async def test_two_gateways_on_one_redis_share_a_keys_limit_atomically(redis_server) -> None:
    prefix = f"limits{next(PREFIXES)}:"
    # Redis's speed is not the subject: a command that a busy machine kept past the default 0.1 s would
    # let its request through uncounted.
    patient = GuardPolicy(timeout_s=within(DEFAULT_POLICY.timeout_s),
                          connect_timeout_s=within(DEFAULT_POLICY.connect_timeout_s))
    one, two = (ClientLimits([key(rpm=5, tpm=100_000)], redis_server.url, prefix, patient) for _ in range(2))

    results = await asyncio.gather(*(admitted(one if i % 2 else two, ASK) for i in range(12)))
    assert one.guard is not None and two.guard is not None and one.guard.failed == two.guard.failed == 0
    assert sum(results) == 5
    await one.close()
    await two.close()


async def test_a_redis_that_is_down_lets_requests_through() -> None:
    limits = ClientLimits([key(rpm=1)], "redis://127.0.0.1:9/0")
    for _ in range(3):
        assert await limits.admit("app", ASK) is not None
    await limits.close()


def test_the_gateway_answers_429_in_openais_shape(upstream, tmp_path) -> None:
    settings = {"upstreams": {"fake": {"url": upstream.url, "key": UPSTREAM_KEY}}, "models": {"chat": ["fake/echo"]},
                "keys": [{"name": "app", "key": "client-key-limited", "rpm": 2}]}
    with GatewayProcess(settings, tmp_path) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="client-key-limited", max_retries=0)
        started = time.monotonic()
        for _ in range(2):
            client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}], stream=True)
        assert refused.value.status_code == 429
        assert int(refused.value.response.headers["retry-after"]) in retry_after_since(started, per_request_s=30)
        assert refused.value.code == "rate_limit_exceeded" and "over its limit of 2 requests" in refused.value.message
