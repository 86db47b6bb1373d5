"""Hedged streams through the real gateway: a first token that is late starts the same request on the
next target, the first to produce a token is the answer (whole and in order), the other is cut off, and
x-firsttoken-route names both."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from conftest import ADMIN, ADMIN_KEY, CLIENT_KEY
from support.gateway_process import GatewayProcess
from support.openai_upstream import UPSTREAM_KEY, UpstreamThread
from support.waiting import not_before, wait_until, within

USER = [{"role": "user", "content": "race me"}]
HEDGE_S = 0.2  # every target's hedge delay here (routing.hedge.max_s: nothing measured yet)


@pytest.fixture(scope="module")
def gateway(upstream, tmp_path_factory):
    # every request must cross to the upstream: the edge cache (on by default) has its own tests
    settings = {"cache": False, "upstreams": {"fake": {"url": upstream.url, "key": UPSTREAM_KEY}},
                "models": {"stalls": ["fake/sleep-3000", "fake/echo"],
                           "queued": ["fake/late-1500", "fake/echo"],
                           # its first token 0.8 s after the hedge went: the hedge goes first even on a
                           # busy machine, and the first target still answers long before the hedge
                           "slow-hedge": ["fake/sleep-1000", "fake/sleep-3000"],
                           "no-hedge": ["fake/sleep-600", "fake/echo"],
                           "breaks": ["fake/fail-early", "fake/echo"],
                           "refuses": ["fake/refuse-in-stream", "fake/echo"],
                           "late-then-breaks": ["fake/late-5000", "fake/fail-early"]},
                "routing": {"ordered": ["stalls", "queued", "slow-hedge", "no-hedge", "breaks", "refuses",
                                        "late-then-breaks"],
                            "hedge": {"max_s": HEDGE_S, "budget": 1.0}},  # every request may hedge
                "keys": [{"name": "app", "key": CLIENT_KEY}], "admin_key": ADMIN_KEY}
    with GatewayProcess(settings, tmp_path_factory.mktemp("hedging")) as running:
        yield running


def stream(gateway: GatewayProcess, alias: str) -> tuple[str, str, float]:
    """(x-firsttoken-route, the answer, seconds to its first token)."""
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)
    started = time.perf_counter()
    raw = client.chat.completions.with_raw_response.create(model=alias, messages=USER, stream=True)
    first, text = 0.0, ""
    for chunk in raw.parse():
        if chunk.choices and chunk.choices[0].delta.content:
            first = first or time.perf_counter() - started
            text += chunk.choices[0].delta.content
    return raw.headers["x-firsttoken-route"], text, first


def test_a_late_first_token_is_raced_and_the_hedge_wins(gateway, upstream) -> None:
    before = upstream.stats.by_model.copy()
    route, text, first = stream(gateway, "stalls")
    assert route == "fake/echo; hedge-of=fake/sleep-3000" and text == "echo: race me"
    assert first < within(HEDGE_S)  # the hedge went out at 0.2 s; waiting for the first target would take 3 s
    assert upstream.stats.by_model["sleep-3000"] - before["sleep-3000"] == 1
    assert upstream.stats.by_model["echo"] - before["echo"] == 1
    journey = httpx.get(gateway.url + "/v1/journeys?limit=1", headers={"authorization": f"Bearer {CLIENT_KEY}"})
    latest = journey.json()["data"][0]
    assert latest["route"] == "fake/echo" and latest["hedge"] == "hedge-of=fake/sleep-3000"
    assert latest["attempts"] == 2
    # the wait before the hedge is the first target's slowness, not the gateway's
    waited = re.match(r"fake/sleep-3000 was slow to its first token: after (\d+) ms", latest["verdict"])
    assert waited is not None, latest["verdict"]
    assert not_before(int(waited[1]) / 1000, HEDGE_S, 0.01) and int(waited[1]) / 1000 < within(HEDGE_S)
    assert "a hedge raced fake/echo, which answered first" in latest["verdict"]


def test_the_loser_is_cut_off_so_its_provider_stops_generating(gateway, upstream) -> None:
    aborted = upstream.stats.aborted_streams
    route, text, _ = stream(gateway, "queued")  # its stream is open, its first token 1.5 s away
    assert route == "fake/echo; hedge-of=fake/late-1500" and text == "echo: race me"
    wait_until(lambda: upstream.stats.aborted_streams > aborted, "the loser's stream to be cut off")
    assert upstream.stats.aborted_streams == aborted + 1  # its next write found the connection closed


def test_a_stream_that_breaks_before_its_first_token_moves_to_the_next_target(gateway, upstream) -> None:
    before = upstream.stats.by_model["fail-early"]
    route, text, _ = stream(gateway, "breaks")  # raced, so its headers wait for a token: nothing was sent
    assert route == "fake/echo" and text == "echo: race me"
    assert upstream.stats.by_model["fail-early"] - before == 1
    journey = httpx.get(gateway.url + "/v1/journeys?limit=1", headers={"authorization": f"Bearer {CLIENT_KEY}"})
    assert journey.json()["data"][0]["attempts"] == 2


def test_a_refusal_in_the_stream_is_the_clients_to_see_not_retried(gateway, upstream) -> None:
    echoes = upstream.stats.by_model["echo"]
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)
    with pytest.raises(openai.APIError) as refused:
        for _ in client.chat.completions.create(model="refuses", messages=USER, stream=True):
            pass
    assert refused.value.code == "context_length_exceeded" and "maximum context length" in refused.value.message
    assert upstream.stats.by_model["echo"] == echoes  # another target would refuse it too


def test_a_raced_request_whose_deadline_passes_hears_of_the_deadline(gateway) -> None:
    # The first target's token is 5 s away; the hedge at 0.2 s breaks at once; the client allows 1 s.
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)
    with pytest.raises(openai.APIStatusError) as gave_up:
        client.chat.completions.create(model="late-then-breaks", messages=USER, stream=True,
                                       extra_headers={"x-firsttoken-timeout": "1"})
    assert gave_up.value.status_code == 504 and gave_up.value.code == "client_deadline"


@pytest.fixture()
def own_upstream() -> Iterator[UpstreamThread]:
    """An upstream no other test has used: a slow stream that an earlier test cut off is noticed only at its
    next write, seconds later, and would count as this test's."""
    with UpstreamThread() as server:
        yield server


def test_a_client_that_leaves_while_the_hedge_waits_stops_the_upstream(own_upstream, tmp_path) -> None:
    # A gateway of its own that waits longer before hedging than a busy machine may take to see the client
    # go (`within` its 0.1 s), and a first token later still: a hedge that went would be a gone client's.
    upstream = own_upstream
    patient = 2.0
    assert patient > within(0.1)
    settings = {"cache": False, "upstreams": {"fake": {"url": upstream.url, "key": UPSTREAM_KEY}},
                "models": {"queued": ["fake/late-5000", "fake/echo"]},
                "routing": {"ordered": ["queued"], "hedge": {"max_s": patient, "budget": 1.0}},
                "keys": [{"name": "app", "key": CLIENT_KEY}]}
    aborted, echoes = upstream.stats.aborted_streams, upstream.stats.by_model["echo"]
    with GatewayProcess(settings, tmp_path) as running:
        body = {"model": "queued", "messages": USER, "stream": True}
        with pytest.raises(httpx.ReadTimeout):  # it leaves after 0.1 s, long before the hedge would go
            httpx.post(running.url + "/v1/chat/completions", json=body, timeout=httpx.Timeout(5, read=0.1),
                       headers={"authorization": f"Bearer {CLIENT_KEY}"})
        wait_until(lambda: upstream.stats.aborted_streams > aborted, "the upstream's stream to be cut off")
        assert upstream.stats.aborted_streams == aborted + 1  # late-5000's connection was closed under it
        assert upstream.stats.by_model["echo"] == echoes  # and no hedge went out for a client that had gone


def test_the_first_target_can_still_win_after_a_hedge_went_out(gateway) -> None:
    route, text, _ = stream(gateway, "slow-hedge")
    assert route == "fake/sleep-1000; hedged-by=fake/sleep-3000" and text == "echo: race me"


def test_without_hedge_budget_nothing_is_raced(upstream, tmp_path) -> None:
    settings = {"cache": False, "upstreams": {"fake": {"url": upstream.url, "key": UPSTREAM_KEY}},
                "models": {"no-hedge": ["fake/sleep-600", "fake/echo"]},
                "routing": {"ordered": ["no-hedge"], "hedge": {"max_s": 0.1, "budget": 0}},
                "keys": [{"name": "app", "key": CLIENT_KEY}], "admin_key": ADMIN_KEY}
    with GatewayProcess(settings, tmp_path) as running:
        route, text, first = stream(running, "no-hedge")
    assert route == "fake/sleep-600" and text == "echo: race me" and not_before(first, 0.6)


def test_a_late_whole_answer_is_raced_too(gateway) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)
    started = time.perf_counter()
    raw = client.chat.completions.with_raw_response.create(model="stalls", messages=USER)
    assert raw.headers["x-firsttoken-route"] == "fake/echo; hedge-of=fake/sleep-3000"
    assert raw.parse().choices[0].message.content == "echo: race me"
    assert time.perf_counter() - started < within(HEDGE_S)  # not the 3 s of the first target
    raw = client.chat.completions.with_raw_response.create(model="slow-hedge", messages=USER)
    assert raw.headers["x-firsttoken-route"] == "fake/sleep-1000; hedged-by=fake/sleep-3000"


def test_metrics_count_hedges_and_show_each_target(gateway) -> None:
    stream(gateway, "stalls")
    text = httpx.get(gateway.url + "/metrics", headers=ADMIN).text
    won = next(line for line in text.splitlines() if line.startswith('firsttoken_hedges_total{winner="hedge"}'))
    assert float(won.rpartition(" ")[2]) >= 1
    assert 'firsttoken_target_expected_ttft_seconds{kind="stream",target="fake/echo"}' in text
    assert 'firsttoken_target_circuit_open{target="fake/sleep-3000"} 0.0' in text
    assert "firsttoken_keep_warm_pings_total 0.0" in text


def test_messages_and_responses_streams_hedge_like_chat(gateway, upstream) -> None:
    """The other client formats ride the same race: the hedge's answer reaches the client in its own events."""
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=CLIENT_KEY, max_retries=0, timeout=20)
    started = time.perf_counter()
    raw = claude.messages.with_raw_response.create(model="stalls", max_tokens=50, messages=USER, stream=True)
    text = "".join(event.delta.text for event in raw.parse() if event.type == "content_block_delta")
    assert raw.headers["x-firsttoken-route"] == "fake/echo; hedge-of=fake/sleep-3000" and text == "echo: race me"
    assert time.perf_counter() - started < within(HEDGE_S)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)
    raw = client.responses.with_raw_response.create(model="stalls", input="race me", stream=True)
    text = "".join(event.delta for event in raw.parse() if event.type == "response.output_text.delta")
    assert raw.headers["x-firsttoken-route"] == "fake/echo; hedge-of=fake/sleep-3000" and text == "echo: race me"
    journey = httpx.get(gateway.url + "/v1/journeys?limit=1", headers={"authorization": f"Bearer {CLIENT_KEY}"})
    latest = journey.json()["data"][0]
    assert latest["hedge"] == "hedge-of=fake/sleep-3000" and latest["phases"]["ttft"] < within(HEDGE_S) * 1000
