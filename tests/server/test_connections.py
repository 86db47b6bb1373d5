"""Connections: warm at start-up and reused, abandoned streams aborted upstream (several workers: test_workers.py)."""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from conftest import CLIENT_KEY, gateway_settings
from support.gateway_process import GatewayProcess
from support.openai_upstream import UpstreamThread
from support.waiting import wait_until

USER = [{"role": "user", "content": "hello"}]


@pytest.fixture()
def own_upstream():
    with UpstreamThread() as server:
        yield server


def test_pool_is_warm_before_ready_and_requests_reuse_it(own_upstream, tmp_path) -> None:
    with GatewayProcess(gateway_settings(own_upstream.url), tmp_path) as gateway:
        assert len(own_upstream.stats.connections) == 2  # opened at start-up, before any client
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
        for _ in range(5):
            raw = client.chat.completions.with_raw_response.create(model="chat", messages=USER)
            assert "connect;dur=0.00" in raw.headers["server-timing"]
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda _: list(client.chat.completions.create(model="chat", messages=USER, stream=True)),
                          range(6)))
        time.sleep(0.2)
        assert len(own_upstream.stats.connections) == 2, "no request paid for a new connection"


def test_keep_warm_exercises_the_pool_while_idle(own_upstream, tmp_path) -> None:
    settings = gateway_settings(own_upstream.url)
    settings["upstreams"]["fake"]["pool"] = {"warm": 2, "refresh_s": 0.3}
    with GatewayProcess(settings, tmp_path):
        before = own_upstream.stats.requests
        # nobody calling
        wait_until(lambda: own_upstream.stats.requests >= before + 4, "two refreshes, two probes each")
        assert len(own_upstream.stats.connections) == 2  # on the same warm connections


def test_keep_warm_leaves_the_connections_traffic_keeps_busy_alone(own_upstream, tmp_path) -> None:
    """A refresh that probed every warm connection at once took them from the requests arriving meanwhile,
    and the probes opened new ones beside those traffic held: across an ocean, a handshake each."""
    settings = gateway_settings(own_upstream.url)
    settings["upstreams"]["fake"]["pool"] = {"warm": 8, "refresh_s": 1.0}
    with GatewayProcess(settings, tmp_path) as gateway:
        assert len(own_upstream.stats.connections) == 8
        before = own_upstream.stats.requests - own_upstream.stats.chats
        body = {"model": "fake/sleep-100", "messages": USER}

        # Six clients, each asking again as soon as answered (an answer takes 100 ms), for three refresh rounds:
        # of FIFO-reused connections, each waits about a third of an answer's time between two requests, far
        # from the half round after which it would be probed, however slow the machine. Probing every warm
        # connection at each round would send 24.
        end = time.monotonic() + 3 * 1.0

        def keep_asking(_client: int) -> None:
            while time.monotonic() < end:
                httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=30,
                           headers={"Authorization": f"Bearer {CLIENT_KEY}"}).raise_for_status()

        with ThreadPoolExecutor(6) as pool:
            list(pool.map(keep_asking, range(6)))
        probes = own_upstream.stats.requests - own_upstream.stats.chats - before
        assert probes <= 8, "traffic kept the warm connections fresh: no round probed them all again"
        assert len(own_upstream.stats.connections) <= 10, "no probe took a connection a request then had to open"


def test_client_leaving_mid_stream_aborts_the_upstream(own_upstream, tmp_path) -> None:
    with GatewayProcess(gateway_settings(own_upstream.url), tmp_path) as gateway:
        body = {"model": "fake/slow-stream", "stream": True,
                "messages": [{"role": "user", "content": " ".join(["word"] * 200)}]}
        with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body,
                          headers={"Authorization": f"Bearer {CLIENT_KEY}"}) as response:
            for line in response.iter_lines():
                if "word" in line:
                    break  # leave after the first token, ~10 s before the stream would end
        wait_until(lambda: own_upstream.stats.aborted_streams, "the upstream stream to be aborted")
        assert own_upstream.stats.aborted_streams == 1
        # and the gateway is fine afterwards
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
        assert client.chat.completions.create(model="chat", messages=USER).choices[0].message.content == "echo: hello"


def test_a_client_that_stops_reading_is_dropped_and_its_upstream_aborted(own_upstream, tmp_path) -> None:
    settings = gateway_settings(own_upstream.url)
    settings["streaming"]["client_stall_s"] = 1.0
    with GatewayProcess(settings, tmp_path) as gateway:
        body = json.dumps({"model": "fake/flood", "stream": True, "messages": USER}).encode()
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # and then never read
            sock.connect(("127.0.0.1", gateway.port))
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Authorization: Bearer " + CLIENT_KEY.encode() + b"\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            wait_until(lambda: own_upstream.stats.aborted_streams, "the stalled stream to give up its upstream")
            assert own_upstream.stats.aborted_streams == 1
        assert "dropping a stalled client" in gateway.log()


def test_refresh_follows_the_upstreams_keep_alive_timeout(tmp_path) -> None:
    """An upstream that closes idle connections after 1 s: the pool refreshes sooner, so a client
    request still finds a warm connection after a quiet spell."""
    with UpstreamThread(keepalive_s=1.0) as upstream:
        settings = gateway_settings(upstream.url)
        with GatewayProcess(settings, tmp_path) as gateway:
            time.sleep(2.5)  # the quiet spell itself: longer than the upstream keeps an idle connection
            client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
            raw = client.chat.completions.with_raw_response.create(model="chat", messages=USER)
            assert "connect;dur=0.00" in raw.headers["server-timing"]
            ready = httpx.get(gateway.url + "/readyz").json()
            assert ready["upstreams"]["fake"]["warm"] is True


def test_a_cold_pool_shows_its_connect_cost_once(own_upstream, tmp_path) -> None:
    settings = gateway_settings(own_upstream.url)
    settings["upstreams"]["fake"]["pool"] = {"warm": 0}
    with GatewayProcess(settings, tmp_path) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)

        def connect_ms() -> float:
            raw = client.chat.completions.with_raw_response.create(model="chat", messages=USER)
            return float(raw.headers["server-timing"].split("connect;dur=")[1].split(",")[0])

        assert connect_ms() > 0  # the first request paid for the connection
        assert connect_ms() == 0  # the next one reused it
