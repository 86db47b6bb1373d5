"""The gateway's machinery on the Messages and Responses routes, against the real-format test upstream:
fields an OpenAI upstream's prompt cache keys on reach it untouched, identical requests in flight share one
upstream stream (each client hearing it in its own format), and a key's limits refuse in the route's own
error shape."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from conftest import CLIENT_KEY
from support.faulty_answers import HELD, HELD_TEXT
from support.gateway_process import GatewayProcess
from support.openai_upstream import UPSTREAM_KEY
from support.waiting import wait_until

LIMITED_KEY = "sk-limited-key-000000000000"


@pytest.fixture(scope="module")
def gateway(upstream, tmp_path_factory) -> Iterator[GatewayProcess]:
    settings = {"upstreams": {"fake": {"url": upstream.url, "key": UPSTREAM_KEY}},
                "models": {"echo": ["fake/echo"], "inspect": ["fake/inspect"], "held": ["fake/held"]},
                "cache": {"backend": "memory"},
                "keys": [{"name": "app", "key": CLIENT_KEY}, {"name": "limited", "key": LIMITED_KEY, "rpm": 1}]}
    with GatewayProcess(settings, tmp_path_factory.mktemp("formats")) as running:
        yield running


def test_prompt_cache_key_reaches_the_upstream_untouched(gateway, upstream) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    client.responses.create(model="echo", input="cache my prefix", prompt_cache_key="tenant-7-prefix",
                            safety_identifier="user-42", extra_headers={"x-firsttoken-cache": "off"})
    sent = upstream.stats.last_body
    assert sent["prompt_cache_key"] == "tenant-7-prefix" and sent["safety_identifier"] == "user-42"
    assert sent["messages"] == [{"role": "user", "content": "cache my prefix"}]


def test_identical_streams_in_flight_share_one_upstream_stream(gateway, upstream) -> None:
    """A Messages stream and a second identical one started while the first is still upstream: one upstream
    request."""
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=CLIENT_KEY, max_retries=0, timeout=60)
    before = upstream.stats.by_model["held"]
    outcomes: dict[int, str] = {}
    texts: dict[int, str] = {}

    def ask(number: int) -> None:
        raw = claude.messages.with_raw_response.create(model="held", max_tokens=50, stream=True,
                                                       messages=[{"role": "user", "content": "shared flight"}])
        outcomes[number] = raw.headers["x-firsttoken-cache"]
        texts[number] = "".join(e.delta.text for e in raw.parse() if e.type == "content_block_delta")

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(2)]
    with HELD.shut():  # the upstream's answer waits after its first word until the second request has joined it
        threads[0].start()
        wait_until(lambda: upstream.stats.by_model["held"] == before + 1, "the first request upstream")
        threads[1].start()
        wait_until(lambda: len(outcomes) == 2, "both requests to start their streams")
    for thread in threads:
        thread.join(60)
    assert upstream.stats.by_model["held"] - before == 1
    assert sorted(outcomes.values()) == ["hit; joined", "miss"]
    assert set(texts.values()) == {HELD_TEXT} and len(texts) == 2


def test_a_keys_limit_is_refused_in_the_routes_own_shape(gateway) -> None:
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=LIMITED_KEY, max_retries=0)
    claude.messages.create(model="echo", max_tokens=20, messages=[{"role": "user", "content": "one"}])
    with pytest.raises(anthropic.RateLimitError) as refused:
        claude.messages.create(model="echo", max_tokens=20, messages=[{"role": "user", "content": "two"}])
    assert refused.value.body["type"] == "error" and refused.value.body["error"]["type"] == "rate_limit_error"
    assert refused.value.response.headers["retry-after"]
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=LIMITED_KEY, max_retries=0)
    with pytest.raises(openai.RateLimitError):
        client.responses.create(model="echo", input="three")


def test_the_journey_says_which_api_the_client_spoke(gateway) -> None:
    headers = {"authorization": f"Bearer {CLIENT_KEY}"}
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=CLIENT_KEY, max_retries=0)
    raw = claude.messages.with_raw_response.create(model="echo", max_tokens=20,
                                                   messages=[{"role": "user", "content": "which api?"}])
    journey = httpx.get(f"{gateway.url}/v1/journeys/{raw.headers['x-request-id']}", headers=headers).json()
    assert journey["api"] == "messages" and journey["phases"]["e2e"] > 0
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    raw = client.responses.with_raw_response.create(model="echo", input="which api?")
    journey = httpx.get(f"{gateway.url}/v1/journeys/{raw.headers['x-request-id']}", headers=headers).json()
    assert journey["api"] == "responses"
