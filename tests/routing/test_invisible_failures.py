"""The routing promise, end to end: killing, slowing or rate-limiting any one upstream is invisible to
clients except in the journey log.

Two real simulated regions (`firsttoken sim` processes) serve the same model as upstreams `a` and `b`
behind one alias; a real gateway process sits in front, and clients are the `openai` SDK with its own
retries off, so that only the gateway can hide a failure. Then `a` is killed, made to fail, rate limited
or slowed, and every request must still get its whole answer, traffic must leave `a`, and the journey
log must show what the client never saw.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from conftest import CLIENT_KEY
from firsttoken.config import Breaker
from firsttoken.journey.log import read as read_journey_log
from firsttoken.sim.text import answer
from support.gateway_process import GatewayProcess
from support.limits import retry_after_since
from support.sim_process import SimProcess
from support.waiting import PATIENCE_S, wait_until

MODEL = "llama-3.2-1b"  # the smallest in the catalogue: 1.7 ms a token, so a run of 20 takes a second
A, B = f"a/{MODEL}", f"b/{MODEL}"
MAX_TOKENS = 16
EXPECTED = "".join(answer(MAX_TOKENS, []).pieces)  # the region's deterministic answer: the whole of it
USER = [{"role": "user", "content": "Tell me how the request travelled."}]
AUTH = {"authorization": f"Bearer {CLIENT_KEY}"}
# The default failures in a row (5) open a target, for longer than any test runs: no half-open probe comes
# to `a` however slow the machine, so what `a` sees is counted, not guessed from how long the run took.
BREAKER = Breaker(open_s=600, max_open_s=600)


@dataclass(frozen=True)
class Answered:
    route: str
    request_id: str
    stream: bool


def ask(client: openai.OpenAI, stream: bool) -> Answered:
    """One request through the gateway; it must come back whole (a stream: every token, its finish, and
    no error event, which the SDK would raise as an APIError)."""
    raw = client.chat.completions.with_raw_response.create(model="chat", messages=USER, max_tokens=MAX_TOKENS,
                                                           stream=stream)
    if stream:
        text, finish = "", None
        for chunk in raw.parse():
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
    else:
        completion = raw.parse()
        text, finish = completion.choices[0].message.content, completion.choices[0].finish_reason
        assert completion.usage is not None and completion.usage.completion_tokens == MAX_TOKENS
    assert (text, finish) == (EXPECTED, "length")
    return Answered(raw.headers["x-firsttoken-route"], raw.headers["x-request-id"], stream)


def run(client: openai.OpenAI, n: int) -> list[Answered]:
    """n requests one after another, streams and whole answers in turn."""
    return [ask(client, stream=i % 2 == 1) for i in range(n)]


def journeys(gateway: GatewayProcess, answered: list[Answered]) -> list[dict]:
    """The journeys of these requests, in the same order, from GET /v1/journeys."""
    data = httpx.get(gateway.url + "/v1/journeys?limit=1000", headers=AUTH, timeout=5).json()["data"]
    by_id = {j["request_id"]: j for j in data}
    return [by_id[a.request_id] for a in answered]


@pytest.fixture(scope="module")
def b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    """The healthy region, shared: each test counts what it saw as a difference."""
    with SimProcess(tmp_path_factory.mktemp("region-b"), "--model", MODEL, name="b") as sim:
        yield sim


@contextmanager
def regions(workdir: Path, b: SimProcess, *a_args: str, ordered: bool = True, a_warm: int | None = None
            ) -> Iterator[tuple[GatewayProcess, SimProcess, openai.OpenAI]]:
    """Region `a` (started with `a_args`) and the shared `b` behind alias `chat`, through a new gateway
    (so that its router starts with no memory). `ordered`: `a` is always tried first while it is healthy.
    `a_warm`: connections kept open to `a` ahead of need (the pool's default when None)."""
    with SimProcess(workdir, "--model", MODEL, *a_args, name="a") as a:
        upstream_a = {"url": a.url, **({"pool": {"warm": a_warm}} if a_warm is not None else {})}
        # every request must cross to the upstream: the edge cache (on by default) has its own tests
        settings = {"cache": False, "upstreams": {"a": upstream_a, "b": {"url": b.url}},
                    "models": {"chat": [A, B]},
                    "routing": {"ordered": ["chat"] if ordered else [],
                                "breaker": {"failures": BREAKER.failures, "open_s": BREAKER.open_s,
                                            "max_open_s": BREAKER.max_open_s}},
                    "keys": [{"name": "app", "key": CLIENT_KEY}]}
        with GatewayProcess(settings, workdir) as gateway:
            client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)
            yield gateway, a, client


@pytest.mark.parametrize("in_flight_stream", [False, True], ids=["whole-in-flight", "stream-in-flight"])
def test_a_killed_upstream_is_invisible(b: SimProcess, tmp_path: Path, in_flight_stream: bool) -> None:
    b_before = b.requests()
    with regions(tmp_path, b) as (gateway, a, client):
        healthy = run(client, 6)
        assert {x.route for x in healthy} == {A}  # ordered: `a` serves while it lives
        # The next request waits in a's queue, so that it is in flight (reached `a`, no byte back yet) when
        # the process dies: the gateway must retry it on `b` without the client noticing.
        a.faults(queue_ms=10_000)
        received = a.requests()["received"]
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(ask, client, in_flight_stream)
            wait_until(lambda: a.requests()["received"] > received, "the request to reach `a`")
            a.kill()
            in_flight = pending.result(timeout=PATIENCE_S)
        after = run(client, 7)
        assert in_flight.route == B and {x.route for x in after} == {B}
        seen = journeys(gateway, [in_flight, *after])
    assert b.requests()["answered"] - b_before["answered"] == 8  # every request after the kill, once

    # The kill is visible only in the journey log: the in-flight request and the next ones took two
    # attempts (a, then b) until a's breaker opened after BREAKER.failures failures in a row (the
    # in-flight one was the first); after that `a` is left out and one attempt is enough: it stays open
    # for BREAKER.open_s, so no half-open probe goes to the dead region.
    assert [j["attempts"] for j in seen] == [2] * BREAKER.failures + [1] * (len(seen) - BREAKER.failures)
    assert all(j["status"] == 200 and j["route"] == B for j in seen)
    logged = {row["id"]: row for row in read_journey_log(tmp_path / "firsttoken-journeys.db")}  # flushed on exit
    assert logged[in_flight.request_id]["attempts"] == 2 and logged[in_flight.request_id]["route"] == B
    assert all(logged[x.request_id]["attempts"] == 1 and logged[x.request_id]["route"] == A for x in healthy)


# A reset drops the connection as the request arrives. The gateway sends a request once more only when a
# pooled connection was dropped under it (server/egress.py `_open`: the keep-alive race, where the
# upstream never saw it); on a new connection the upstream may have started on it, so it is not resent.
# With no warm connections to `a`, every attempt opens one: one send each. With warm ones, an attempt on
# a pooled connection may be sent twice.
@pytest.mark.parametrize(("fail", "a_warm", "max_sends"), [("1:500", None, 1), ("1:503", None, 1),
                                                           ("1:reset", 0, 1), ("1:reset", None, 2)],
                         ids=["500", "503", "reset-fresh", "reset-pooled"])
def test_a_failing_upstream_is_invisible_and_left_out(b: SimProcess, tmp_path: Path, fail: str,
                                                       a_warm: int | None, max_sends: int) -> None:
    with regions(tmp_path, b, "--fail", fail, a_warm=a_warm) as (gateway, a, client):
        answered = run(client, 2 * BREAKER.failures + 2)
        assert {x.route for x in answered} == {B}
        seen = journeys(gateway, answered)
        failed = a.requests()["failed"]
    # Health (routing/health.py): BREAKER.failures failures in a row open a's circuit for BREAKER.open_s,
    # longer than the run; while open it goes last (never tried, since b answers). So `a` sees exactly
    # BREAKER.failures attempts, each sent at most max_sends times.
    assert BREAKER.failures <= failed <= BREAKER.failures * max_sends, failed
    if max_sends == 1:
        assert failed == BREAKER.failures
    retried = [j["attempts"] for j in seen]
    assert retried == [2] * BREAKER.failures + [1] * (len(seen) - BREAKER.failures), retried
    assert all(j["status"] == 200 and j["route"] == B for j in seen)


def test_a_rate_limited_upstream_is_invisible_and_cooled(b: SimProcess, tmp_path: Path) -> None:
    with regions(tmp_path, b, "--rpm", "2") as (gateway, a, client):
        started = time.monotonic()
        answered = run(client, 20)
        # The first two fit a's 2 requests a minute; the third's 429 sends it to `b`, and `a` then cools
        # for the Retry-After it sent (about 30 s: one request's refill at 2 a minute), longer than the run.
        assert [x.route for x in answered] == [A, A] + [B] * 18
        counts = a.requests()
        assert (counts["answered"], counts["refused"]) == (2, 1)
        assert [j["attempts"] for j in journeys(gateway, answered)] == [1, 1, 2] + [1] * 17
        # `a` still refuses now: the gateway left it alone because it was told to wait, not by luck.
        refused = httpx.post(a.url + "/chat/completions", json={"model": MODEL, "messages": USER, "max_tokens": 1},
                             timeout=5)
        # Its bucket (a request every 30 s) has refilled only for as long as the run took, however long.
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) in retry_after_since(started, per_request_s=30), refused.headers


# The queues that move traffic, far apart next to what a busy machine adds to a first token: while the
# router learns, `b` is slower by B_QUEUE_MS; then `a` by A_QUEUE_MS, of which one measurement (30 % of the
# estimate, routing/estimate.py) lifts a's estimate by a few hundred ms above b's learned one.
B_QUEUE_MS, A_QUEUE_MS = 100, 1200


def test_a_slowed_upstream_is_invisible_and_traffic_moves(b: SimProcess, tmp_path: Path) -> None:
    with regions(tmp_path, b, ordered=False) as (gateway, a, client):
        b.faults(queue_ms=B_QUEUE_MS)  # while the router learns, `b` is the slower: traffic settles on `a`
        try:
            warm = run(client, 8)
        finally:
            b.faults(queue_ms=0)
        assert {x.route for x in warm[-4:]} == {A}, [x.route for x in warm]
        a.faults(queue_ms=A_QUEUE_MS)  # then `a` is suddenly busy with other people's traffic
        before = a.requests()["received"]
        slowed = run(client, 16)
        seen = journeys(gateway, slowed)
        slow_to_a = a.requests()["received"] - before
    routes = [x.route for x in slowed]
    # Each kind (streams, whole answers) has its own first-token estimate: one slow measurement lifts a's
    # far above b's, and it drifts back only over tens of seconds (routing/estimate.py), so about one
    # request of each kind meets the slow `a`, and the rest go to `b`.
    assert 1 <= slow_to_a <= 4, routes
    assert routes[-10:].count(B) >= 9, routes
    # What the client did not see, the journey shows: a's own account of the extra queue.
    slow = [j for j in seen if j["route"] == A]
    assert len(slow) == slow_to_a and all(j["upstream_timing"]["queue"] >= A_QUEUE_MS - 10 for j in slow)
    assert all(j["status"] == 200 and j["attempts"] == 1 for j in seen)
