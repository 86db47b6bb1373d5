"""Phases and verdicts from timelines with known clock values, and the kernel's RTT of a real socket."""

from __future__ import annotations

import socket
import time

import pytest

from firsttoken.journey.attribution import attribute
from firsttoken.journey.server_timing import parse_server_timing
from firsttoken.journey.tcp_info import Rtt, RttReader, rtt_of
from firsttoken.journey.timeline import Timeline
from firsttoken.spend.usage import usage_count


def timeline(*, rtt: float = 120.0, connect: float = 0.0, ttfb: float = 400.0, decode: float = 1000.0,
             tokens: int = 50, client_rtt: float = 5.0, stream: bool = True, floor: float | None = 90.0,
             upstream_timing: str | None = None, status: int = 200) -> Timeline:
    """A request received at t=0 that left after 1 ms; times in ms."""
    t = Timeline("req_1")
    t.received, t.sent = 0.0, 0.001
    t.first_byte = t.sent + (connect + ttfb) / 1000
    t.first_token = t.first_byte + 0.0005 if stream else 0.0
    t.last_token = t.first_token + decode / 1000 if stream else 0.0
    t.last_byte = (t.last_token if stream else t.first_byte) + 0.001
    t.connect_ms, t.reused = connect, connect == 0
    t.upstream_rtt = Rtt(rtt + 3, rtt)
    t.client_rtt = Rtt(client_rtt, client_rtt)
    t.token_events, t.output_tokens, t.stream, t.floor_ms, t.status = tokens, tokens, stream, floor, status
    t.upstream_said(upstream_timing)
    t.route, t.upstream = "far/model", "far"
    return t


def test_phases_follow_the_vocabulary() -> None:
    journey = attribute(timeline(connect=250.0, ttfb=400.0))
    p = journey.phases
    assert p.connect == 250.0 and p.ttfb == pytest.approx(400.0)  # sent upstream → first byte, after the handshakes
    assert p.rtt == 120.0 and p.floor == 90.0 and p.distance_tax == pytest.approx(30.0)
    assert p.queue_prefill == pytest.approx(400 - 120)  # ttfb − rtt
    assert p.gateway == pytest.approx(1.0) and p.decode == pytest.approx(1000.0)
    assert journey.tokens_per_s == pytest.approx(50.0) and not journey.reused_connection
    data = journey.to_dict()
    assert set(data["phases"]) == {"client_rtt", "gateway", "cache", "pool", "connect", "ttfb", "rtt", "floor",
                                   "distance tax", "queue+prefill", "ttft", "decode", "e2e"}


@pytest.mark.parametrize("facts, words", [
    (dict(ttfb=125.0), "most of this wait was distance: a 120 ms round trip, 90 ms of it the speed of light"),
    (dict(ttfb=2120.0), "most of this wait was the provider's queue and prefill: 2000 ms"),
    (dict(client_rtt=240.0, ttfb=125.0), "your own connection added 240 ms"),
    (dict(connect=400.0, ttfb=130.0), "a new connection cost 400 ms of handshakes"),
    (dict(ttfb=4300.0, upstream_timing="queue;dur=10, cold;dur=4100, prefill;dur=60"),
     "a cold start: 4.1 s before the first token"),
    (dict(status=502), "failed with HTTP 502"),
])
def test_verdicts_name_the_largest_part(facts: dict, words: str) -> None:
    assert words in attribute(timeline(**facts)).verdict


def test_generation_pace_in_the_verdict() -> None:
    journey = attribute(timeline(ttfb=125.0, decode=2000.0, tokens=812))
    assert journey.verdict.endswith("; generation: 812 tokens at 406 tok/s")


def test_a_whole_answer_splits_only_with_the_providers_own_timing() -> None:
    plain = attribute(timeline(stream=False, ttfb=1120.0))
    assert plain.phases.queue_prefill is None and plain.phases.decode is None
    assert "the provider: 1000 ms of queue, prefill and generation" in plain.verdict
    told = attribute(timeline(stream=False, ttfb=1120.0, upstream_timing="queue;dur=100, cold;dur=0, prefill;dur=50"))
    assert told.phases.queue_prefill == pytest.approx(150) and told.phases.decode == pytest.approx(850)


def test_a_simulated_regions_distance_counts_as_round_trip() -> None:
    journey = attribute(timeline(rtt=0.02, ttfb=140.0, upstream_timing="queue;dur=0, prefill;dur=8, distance;dur=129"))
    assert journey.phases.rtt == pytest.approx(129.02)
    assert journey.phases.queue_prefill == pytest.approx(140 - 129.02)


def test_parse_server_timing() -> None:
    assert parse_server_timing('queue;dur=1.5, cold;desc="x";dur=0, prefill;dur=30, bad;dur=x, nodur') == {
        "queue": 1.5, "cold": 0.0, "prefill": 30.0}
    assert parse_server_timing(None) == {}


def test_usage_counts_found_without_parsing() -> None:
    answer = b'{"usage":{"prompt_tokens":5,"completion_tokens": 42,"total_tokens":47}}'
    assert usage_count(answer, b'"completion_tokens":') == 42 and usage_count(answer, b'"prompt_tokens":') == 5
    assert usage_count(b'{"choices":[]}', b'"completion_tokens":') is None


def test_kernel_rtt_of_a_real_connection() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        started = time.perf_counter()
        with socket.create_connection(server.getsockname()) as client, server.accept()[0] as accepted:
            client.sendall(b"ping")
            accepted.recv(4)
            accepted.sendall(b"pong")
            client.recv(4)
            exchanged_ms = (time.perf_counter() - started) * 1000
            rtt = rtt_of(client)
    # the kernel's round trips were all taken within the exchange, however long a busy machine made it
    assert rtt is not None and 0 < rtt.smoothed_ms <= exchanged_ms
    assert rtt.min_ms is None or rtt.min_ms <= rtt.smoothed_ms
    assert rtt_of(None) is None
    a, b = socket.socketpair()
    with a, b:
        assert rtt_of(a) is None  # not TCP


class _Transport:
    """What the reader asks of a transport: its socket."""

    def __init__(self, sock: socket.socket | None) -> None:
        self.sock = sock
        self.reads = 0

    def get_extra_info(self, name: str) -> socket.socket | None:
        assert name == "socket"
        self.reads += 1
        return self.sock


def test_the_reader_asks_the_kernel_once_per_connection_and_age() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname()) as client, server.accept()[0]:
            reader = RttReader(max_age_s=1.0)
            first, second = _Transport(client), _Transport(client)
            rtt = reader.rtt(first, now=10.0)
            assert rtt is not None and reader.rtt(first, now=10.5) is rtt and first.reads == 1
            assert reader.rtt(first, now=11.5) is not None and first.reads == 2  # past its age
            reader.rtt(first, now=11.6, fresh=True)
            assert first.reads == 3
            reader.rtt(second, now=11.6)
            assert second.reads == 1  # another connection, its own reading
            del first
            replacement = _Transport(None)  # may well be given the id `first` had: it is still read itself
            assert reader.rtt(replacement, now=11.7) is None and replacement.reads == 1
    assert reader.rtt(None, now=12.0) is None
