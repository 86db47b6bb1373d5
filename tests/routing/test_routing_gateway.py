"""Routing through the real gateway in front of a real test upstream: traffic settles on the target that
gives the first token soonest, a target that keeps failing is left out by its breaker while every client
request still succeeds, and a 429 cools its target for the Retry-After it sent."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import openai
import pytest

from conftest import ADMIN, ADMIN_KEY, CLIENT_KEY
from support.gateway_process import GatewayProcess
from support.openai_upstream import UPSTREAM_KEY
from support.threaded import InThread
from support.waiting import not_before, within

USER = [{"role": "user", "content": "route me"}]
RETRY_AFTER_S = 7  # the test upstream's on its 429s


@pytest.fixture(scope="module")
def gateway(upstream, tmp_path_factory):
    # every request must cross to the upstream: the edge cache (on by default) has its own tests
    settings = {"cache": False, "upstreams": {"fake": {"url": upstream.url, "key": UPSTREAM_KEY}},
                "models": {"speedy": ["fake/sleep-400", "fake/sleep-20"],
                           "failing": ["fake/error-500", "fake/echo"],
                           "limited": ["fake/error-429", "fake/echo"],
                           "fixed": ["fake/sleep-400", "fake/sleep-20"],
                           "hangs": ["fake/hang", "fake/echo"],
                           "queued-alone": ["fake/late-2000"],
                           "slow-body": ["fake/slow-body", "fake/echo"]},
                # a breaker that opens stays open for longer than the module runs: no half-open probe
                "routing": {"ordered": ["fixed", "hangs"], "hedge": {"enabled": False},
                            "breaker": {"open_s": 600, "max_open_s": 600}},
                "keys": [{"name": "app", "key": CLIENT_KEY}], "admin_key": ADMIN_KEY}
    with GatewayProcess(settings, tmp_path_factory.mktemp("routing")) as running:
        yield running


def client(gateway: GatewayProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)


def routes(gateway: GatewayProcess, alias: str, n: int, stream: bool = True) -> Counter[str]:
    """Which target answered each of n requests; every one must succeed."""
    answered: Counter[str] = Counter()
    for _ in range(n):
        raw = client(gateway).chat.completions.with_raw_response.create(model=alias, messages=USER, stream=stream)
        if stream:
            assert "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices) == "echo: route me"
        else:
            assert raw.parse().choices[0].message.content == "echo: route me"
        answered[raw.headers["x-firsttoken-route"]] += 1
    return answered


def test_traffic_settles_on_the_target_with_the_soonest_first_token(gateway) -> None:
    answered = routes(gateway, "speedy", 20)
    assert answered["fake/sleep-20"] >= 18, answered  # the slow one is tried once or twice, then left
    assert routes(gateway, "fixed", 3) == {"fake/sleep-400": 3}  # an ordered alias keeps its order


def test_a_failing_target_is_left_out_and_every_request_succeeds(gateway, upstream) -> None:
    before = upstream.stats.by_model["error-500"]
    answered = routes(gateway, "failing", 12, stream=False) + routes(gateway, "failing", 12)
    assert answered == {"fake/echo": 24}
    assert upstream.stats.by_model["error-500"] - before == 5  # the breaker opened after 5 in a row


def test_a_429_cools_its_target_for_its_retry_after(gateway, upstream) -> None:
    before = upstream.stats.by_model["error-429"]
    started = time.monotonic()
    assert routes(gateway, "limited", 10) == {"fake/echo": 10}
    took = time.monotonic() - started
    # Retry-After: 7 s: asked once, and once more per 7 s only if this machine took that long
    assert 1 <= upstream.stats.by_model["error-429"] - before <= 1 + took // RETRY_AFTER_S, took


@pytest.mark.parametrize("stream", [False, True])
def test_the_clients_deadline_is_honoured(gateway, upstream, stream: bool) -> None:
    before = upstream.stats.by_model["echo"]
    started = time.perf_counter()
    with pytest.raises(openai.APIStatusError) as gave_up:
        client(gateway).chat.completions.create(model="hangs", messages=USER, stream=stream,
                                                extra_headers={"x-firsttoken-timeout": "0.5"})
    waited = time.perf_counter() - started
    assert not_before(waited, 0.5) and waited < within(0.5), waited
    assert gave_up.value.status_code == 504 and gave_up.value.code == "client_deadline"
    assert "0.5 s this request allowed (x-firsttoken-timeout)" in gave_up.value.message
    assert upstream.stats.by_model["echo"] == before  # nothing was tried after the deadline


def test_the_clients_deadline_bounds_reading_a_whole_answer_too(gateway, upstream) -> None:
    echoes = upstream.stats.by_model["echo"]
    started = time.perf_counter()
    with pytest.raises(openai.APIStatusError) as gave_up:  # its headers come at once, its body after 3 s
        client(gateway).chat.completions.create(model="slow-body", messages=USER,
                                                extra_headers={"x-firsttoken-timeout": "0.3"})
    waited = time.perf_counter() - started
    assert not_before(waited, 0.3) and waited < within(0.3) < 3, waited  # not the body's 3 s
    assert gave_up.value.status_code == 504 and gave_up.value.code == "client_deadline"
    assert upstream.stats.by_model["echo"] == echoes  # and nothing was tried after it


def test_a_deadline_that_passes_on_an_open_stream_is_no_fault_of_the_target(gateway) -> None:
    # The stream opens at once and its first token is 2 s away: the client's 0.3 s pass first, each time.
    for _ in range(6):  # more than the 5 failures in a row that would open the target's circuit
        with client(gateway).chat.completions.with_streaming_response.create(
                model="queued-alone", messages=USER, stream=True,
                extra_headers={"x-firsttoken-timeout": "0.3"}) as raw:
            lines = list(raw.iter_lines())
        errors = [json.loads(line[6:])["error"] for line in lines if line.startswith('data: {"error"')]
        assert [e["code"] for e in errors] == ["client_deadline"] and [x for x in lines if x][-1] == "data: [DONE]"
        assert "0.3 s this request allowed" in errors[0]["message"]
    metrics = httpx.get(gateway.url + "/metrics", headers=ADMIN).text
    assert 'firsttoken_target_circuit_open{target="fake/late-2000"} 0.0' in metrics


def test_the_sdks_read_timeout_bounds_a_whole_answer(gateway) -> None:
    slow = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0, timeout=0.6)
    started = time.perf_counter()
    with pytest.raises((openai.APIStatusError, openai.APITimeoutError)):
        slow.chat.completions.create(model="hangs", messages=USER)
    waited = time.perf_counter() - started
    assert not_before(waited, 0.6) and waited < within(0.6), waited  # it hangs for an hour


def test_a_deadline_that_is_not_a_number_is_refused(gateway) -> None:
    with pytest.raises(openai.BadRequestError, match="x-firsttoken-timeout must be a number"):
        client(gateway).chat.completions.create(model="chat-never-reached", messages=USER,
                                                extra_headers={"x-firsttoken-timeout": "soon"})


@asynccontextmanager
async def not_http() -> AsyncIterator[int]:
    """A server on loopback that answers every request with a line that is not HTTP: its port."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_that_does_not_speak_http_counts_as_failed(upstream, tmp_path, stream: bool) -> None:
    with InThread(not_http) as port:
        settings = {"cache": False, "upstreams": {"junk": {"url": f"http://127.0.0.1:{port}/v1", "pool": {"warm": 0}},
                                  "fake": {"url": upstream.url, "key": UPSTREAM_KEY}},
                    "models": {"junk-first": ["junk/x", "fake/echo"], "junk-only": ["junk/x"]},
                    "routing": {"ordered": ["junk-first"]}, "keys": [{"name": "app", "key": CLIENT_KEY}]}
        with GatewayProcess(settings, tmp_path) as gateway:
            assert routes(gateway, "junk-first", 2, stream) == {"fake/echo": 2}
            with pytest.raises(openai.APIStatusError) as refused:
                client(gateway).chat.completions.create(model="junk-only", messages=USER, stream=stream)
    assert refused.value.status_code == 502 and refused.value.code == "upstream_bad_response"
    assert "is not valid HTTP: Bad status line" in refused.value.message
