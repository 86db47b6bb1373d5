"""The upstream fault matrix: every fault an upstream (or the way to it) can have, answering a whole request
and a stream, on each client route (chat completions, Messages, Responses), through one real gateway process
with its edge cache on and short bounds.

Each cell asks four times: once; again (a failure was not kept, so the upstream is asked again); then twice
at once (single flight shares no failure as an answer). It checks what the client got and how soon (an error
in the route's own shape, or once a stream has started the route's in-stream error event; never a wait past
the bound that applies), what the router recorded (GET /v1/routing: a breaker opened by two failures, none
by a 429, whose cool-down moves traffic elsewhere), what the journey says, and that the metrics count
failures as failures."""

from __future__ import annotations

import itertools
import json
import ssl
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trustme

from faults.fault_upstream import DRIP_S, FAULTS, TEXT, FaultUpstream, Untrusted
from firsttoken.formats.messages_answer import ERROR_TYPES
from support.gateway_process import GatewayProcess
from support.threaded import InThread
from support.waiting import not_before, wait_until, within

BOUND_S = 0.4  # first_byte and idle: what a stalled upstream may cost a client (DRIP_S stays well under)
# What a quiet machine takes to carry an answer of OVERSIZE bytes through the gateway: no wait, but not none.
CARRY_OVERSIZE_S = 0.2
ROUTES = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}
# Messages to an upstream that speaks Anthropic's API itself: its events pass through (Source.native).
NATIVE = "native"
SHAPES = ("whole", "stream")
UNREACHABLE = ("tls-untrusted", "dns-unresolved")  # faults of the way to the upstream, not of the upstream
MATRIX_FAULTS = [f for f in FAULTS if f != "healthy"] + list(UNREACHABLE)
QUESTION = itertools.count()
BROKEN = "upstream_stream_broken"


@dataclass(frozen=True)
class Expect:
    """What a client of one cell gets: an answer (status 200, no code), or an error with this status and
    code, `in_stream` when it comes as the stream's error event after a 200; `waits`: the seconds the
    gateway must wait out before it may say so (a bound, or the upstream's own pace); `carries`: what a
    quiet machine takes to move the answer's bytes (an upper bound's part, never a lower one's)."""
    status: int
    code: str | None = None
    in_stream: bool = False
    waits: float = 0.0
    carries: float = 0.0

    @property
    def answered(self) -> bool:
        return self.code is None


def _expect(fault: str, shape: str) -> Expect:
    stream = shape == "stream"
    table = {
        "reset-before-headers": Expect(502, "upstream_unreachable"),
        "status-5xx": Expect(503, "overloaded"),
        "status-429": Expect(429, "rate_limit_exceeded"),
        "stall-first-byte": Expect(504, "upstream_timeout", waits=BOUND_S),
        "stall-mid-stream": Expect(200, "upstream_timeout", True, BOUND_S) if stream
        else Expect(504, "upstream_timeout", waits=BOUND_S),
        "reset-mid-stream": Expect(200, "upstream_stream_broken", True) if stream
        else Expect(502, "upstream_unreachable"),
        "not-sse": Expect(502, "upstream_bad_response"),
        "garbage-events": Expect(200, "upstream_stream_broken", True) if stream
        else Expect(502, "upstream_bad_response"),
        "truncated-json": Expect(200, "upstream_stream_broken", True) if stream
        else Expect(502, "upstream_bad_response"),
        # A whole body has no bound of its own yet (docs/reliability.md): a large answer is an answer.
        "oversize-event": Expect(200, "upstream_event_too_large", True, carries=CARRY_OVERSIZE_S) if stream
        else Expect(200, carries=CARRY_OVERSIZE_S),
        "drip": Expect(200, waits=2 * DRIP_S),
        "tls-untrusted": Expect(502, "upstream_unreachable"),
        "dns-unresolved": Expect(502, "upstream_unreachable"),
    }
    return table[fault]


CELLS = [(fault, shape, route) for fault in MATRIX_FAULTS for shape in SHAPES for route in ROUTES]
# The faults whose handling depends on what the upstream speaks: its error bodies, its events, its answers.
SPOKEN = ["status-5xx", "status-429", "stall-mid-stream", "reset-mid-stream", "not-sse", "garbage-events",
          "truncated-json", "oversize-event"]
CELLS += [(fault, shape, NATIVE) for fault in SPOKEN for shape in SHAPES]


def cell_name(fault: str, shape: str, route: str) -> str:
    return f"{fault}.{shape}.{route}"


def upstream_of(fault: str, route: str) -> str:
    return {"tls-untrusted": "tls", "dns-unresolved": "dns"}.get(fault, "claude" if route == NATIVE else "fault")


def client_route(route: str) -> str:
    """The route a cell's client asks: a native cell's is Messages."""
    return "messages" if route == NATIVE else route


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FaultUpstream, Untrusted, trustme.CA]]:
    ca = trustme.CA()  # nobody's: the gateway trusts the system's CAs only
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    fault, untrusted = FaultUpstream(), Untrusted(context)
    with InThread(fault.serving), InThread(untrusted.serving):
        yield fault, untrusted, ca


@pytest.fixture(scope="module")
def gateway(servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    fault, untrusted, _ = servers
    bounds = {"connect": 1.0, "first_byte": BOUND_S, "idle": BOUND_S, "total": 10.0}
    upstreams = {
        "fault": {"url": fault.url, "pool": {"warm": 0}, "timeouts": bounds},
        "tls": {"url": f"https://localhost:{untrusted.port}/v1", "pool": {"warm": 0}, "timeouts": bounds},
        "dns": {"url": "http://no-such-upstream.invalid/v1", "pool": {"warm": 0}, "timeouts": bounds},
        "claude": {"url": fault.url.replace("/v1", "/anthropic/v1"), "api": "anthropic", "pool": {"warm": 0},
                   "timeouts": bounds},
    }
    models = {cell_name(*cell): [f"{upstream_of(cell[0], cell[2])}/{cell_name(*cell)}"] for cell in CELLS}
    # After a 429, the same target behind an alias with a healthy second: its cool-down sends requests there.
    probes = {f"probe.{shape}.{route}": [f"{upstream_of('status-429', route)}/{cell_name('status-429', shape, route)}",
                                          "fault/healthy.probe"]
              for shape in SHAPES for route in [*ROUTES, NATIVE]}
    settings = {
        "upstreams": upstreams, "models": {**models, **probes},
        "routing": {"hedge": {"enabled": False}, "breaker": {"failures": 2, "open_s": 60},
                    "ordered": list(probes)},
        "cache": {"backend": "memory", "semantic": False},
        "journeys": {"log": None}, "responses": {"store": None},
    }
    with GatewayProcess(settings, Path(tmp_path_factory.mktemp("faults"))) as running:
        yield running


@pytest.fixture(scope="module")
def beating(servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """A gateway whose heartbeats start a stream before its first byte is due, as the defaults do (5 s
    against 600 s): a stall then ends a stream already under way."""
    fault = servers[0]
    bounds = {"first_byte": BOUND_S, "idle": BOUND_S}
    settings = {"upstreams": {"fault": {"url": fault.url, "pool": {"warm": 0}, "timeouts": bounds}},
                "models": {f"stall-first-byte.heartbeat.{route}": [f"fault/stall-first-byte.heartbeat.{route}"]
                           for route in ROUTES},
                "streaming": {"heartbeat_s": 0.1}, "routing": {"hedge": {"enabled": False}},
                "cache": {"backend": "memory", "semantic": False},
                "journeys": {"log": None}, "responses": {"store": None}}
    with GatewayProcess(settings, Path(tmp_path_factory.mktemp("beating"))) as running:
        yield running


@dataclass
class Answer:
    status: int
    headers: httpx.Headers
    body: bytes
    elapsed: float

    @property
    def request_id(self) -> str:
        return self.headers["x-request-id"]

    @property
    def is_stream(self) -> bool:
        return self.headers.get("content-type", "").startswith("text/event-stream")


def request_body(route: str, model: str, stream: bool, question: str) -> dict:
    if route == "messages":
        return {"model": model, "max_tokens": 64, "stream": stream,
                "messages": [{"role": "user", "content": question}]}
    if route == "responses":
        return {"model": model, "input": question, "stream": stream}
    return {"model": model, "stream": stream, "messages": [{"role": "user", "content": question}]}


def ask(gateway: GatewayProcess, route: str, model: str, stream: bool, question: str) -> Answer:
    headers = {"anthropic-version": "2023-06-01"} if route == "messages" else {}
    started = time.perf_counter()
    with httpx.stream("POST", gateway.url + ROUTES[route], json=request_body(route, model, stream, question),
                      headers=headers, timeout=30) as response:
        body = response.read()
    return Answer(response.status_code, response.headers, body, time.perf_counter() - started)


def events(body: bytes) -> list[tuple[str | None, str]]:
    """A stream's events as (name, data), comments left out."""
    found = []
    for raw in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        name, data = None, []
        for line in raw.decode().split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if name is not None or data:
            found.append((name, "\n".join(data)))
    return found


def text_of(route: str, answer: Answer) -> str:
    """The answer's text, read the way the route's clients read it."""
    if not answer.is_stream:
        body = json.loads(answer.body)
        if route == "messages":
            return "".join(block.get("text", "") for block in body["content"])
        if route == "responses":
            return "".join(part["text"] for item in body["output"] if item["type"] == "message"
                           for part in item["content"])
        return body["choices"][0]["message"]["content"]
    text = []
    for name, data in events(answer.body):
        if data == "[DONE]":
            continue
        payload = json.loads(data)
        if route == "chat":
            text += [c["delta"].get("content") or "" for c in payload.get("choices", [])]
        elif name == "content_block_delta" and payload["delta"]["type"] == "text_delta":
            text.append(payload["delta"]["text"])
        elif name == "response.output_text.delta":
            text.append(payload["delta"])
    return "".join(text)


def error_code_in_body(route: str, answer: Answer) -> str:
    """The error of a response that is no stream, checked to be in the route's shape: OpenAI's on chat and
    Responses (its code), Anthropic's on Messages (its type, which follows the status)."""
    body = json.loads(answer.body)
    if route == "messages":
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
        return body["error"]["type"]
    assert set(body) == {"error"} and set(body["error"]) >= {"message", "type", "param", "code"}, body
    return body["error"]["code"]


def stream_error(route: str, answer: Answer) -> str:
    """The one error event of a stream, checked to be the route's own and to end it; its code (Messages:
    its type)."""
    seen = events(answer.body)
    if route == "chat":
        errors = [json.loads(d)["error"] for _, d in seen if d.startswith("{") and '"error"' in d
                  and json.loads(d).get("error") is not None]
        assert len(errors) == 1 and seen[-1] == (None, "[DONE]"), seen[-3:]
        assert all(n is None for n, _ in seen), "a chat stream has no named events"
        return errors[0]["code"]
    if route == "messages":
        names = [n for n, _ in seen]
        assert names.count("error") == 1 and names[-1] == "error", names  # nothing after it
        error = json.loads(seen[-1][1])
        assert error["type"] == "error", error
        return error["error"]["type"]
    names = [n for n, _ in seen]
    assert names.count("error") == 1 and names[-2:] == ["error", "response.failed"], names
    failed = json.loads(seen[-1][1])["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == json.loads(seen[-2][1])["code"]
    return json.loads(seen[-2][1])["code"]


def upstream_of_answer(answer: Answer) -> str:
    return answer.headers["x-firsttoken-route"].split("/")[0]


def anthropic_type(status: int) -> str:
    return ERROR_TYPES.get(status, "api_error")


def check_answer(route: str, expect: Expect, answer: Answer, timed: bool = True) -> None:
    """What the client got, and how soon."""
    assert answer.status == expect.status, (answer.status, answer.body[:300])
    if answer.is_stream:  # every event is one its SDK can read: nothing cut or garbled is passed on
        for _, data in events(answer.body):
            assert data == "[DONE]" or isinstance(json.loads(data), dict), data[:200]
    if timed:  # never before what must be waited out, nor anywhere near a stall (STALL_S) after it
        assert answer.elapsed < within(expect.waits + expect.carries), f"waited {answer.elapsed:.2f} s"
        assert not_before(answer.elapsed, expect.waits), f"answered after {answer.elapsed:.2f} s"
    if expect.answered:
        assert text_of(route, answer).startswith(TEXT)
        return
    joined = answer.headers.get("x-firsttoken-cache") == "hit; joined"
    code = expect.code if route != "messages" else anthropic_type(502 if expect.in_stream else expect.status)
    if expect.in_stream:
        assert answer.is_stream
        # A request that joined an identical one in flight hears that the one it joined broke.
        assert stream_error(route, answer) in ((code, BROKEN) if joined else (code,))
        if route == "messages" and not joined:  # the type says little; the message names what broke
            assert f"upstream {upstream_of_answer(answer)}" in answer.body.decode()
    else:
        assert not answer.is_stream and answer.headers["content-type"].startswith("application/json")
        assert error_code_in_body(route, answer) == code
        if expect.status == 429:
            assert answer.headers["retry-after"] == "30"  # the upstream's, passed on


def journey(gateway: GatewayProcess, request_id: str) -> dict:
    """The request's journey, written as the request ends (maybe a moment after its client read it)."""
    def found() -> dict | None:
        response = httpx.get(f"{gateway.url}/v1/journeys/{request_id}", timeout=5)
        return response.json() if response.status_code == 200 else None

    return wait_until(found, f"the journey of {request_id}")


def breaker(gateway: GatewayProcess, target: str) -> str:
    views = httpx.get(gateway.url + "/v1/routing", timeout=5).json()["data"]
    return next(view["breaker"] for view in views if view["target"] == target)


def counted(gateway: GatewayProcess, model: str, expected: tuple[float, float]) -> None:
    """Wait until the metrics count `expected` (successes, failures) for one model: a request is counted as
    it ends, which may be a moment after its client read the last byte."""
    wait_until(lambda: operations(gateway, model) == expected, f"the metrics to count {expected} for {model}")


def operations(gateway: GatewayProcess, model: str) -> tuple[float, float]:
    """(successes, failures) counted in gen_ai_client_operation_duration_seconds for one model."""
    ok = failed = 0.0
    for line in httpx.get(gateway.url + "/metrics", timeout=5).text.splitlines():
        if line.startswith("gen_ai_client_operation_duration_seconds_count{") and \
                f'gen_ai_request_model="{model}"' in line:
            count = float(line.rsplit(" ", 1)[1])
            if 'error_type=""' in line:
                ok += count
            else:
                failed += count
    return ok, failed


def reached(servers, fault: str, cell: str, question: str) -> int:
    """How many requests with this question reached the upstream (TLS: connections to the listener, any
    question; DNS: none can)."""
    upstream, untrusted, _ = servers
    if fault == "tls-untrusted":
        return untrusted.connections
    return upstream.asked(cell, question)


@pytest.mark.parametrize(("fault", "shape", "route"), CELLS, ids=[cell_name(*cell) for cell in CELLS])
def test_fault_matrix(gateway, servers, fault: str, shape: str, route: str) -> None:
    cell, stream, expect = cell_name(fault, shape, route), shape == "stream", _expect(fault, shape)
    target = f"{upstream_of(fault, route)}/{cell}"
    cell_route, route = route, client_route(route)
    number = next(QUESTION)
    question, twin = f"question {number} for {cell}", f"question {number} twice for {cell}"

    # Once: what the client gets, and when.
    first = ask(gateway, route, cell, stream, question)
    check_answer(route, expect, first)
    seen = journey(gateway, first.request_id)
    assert seen["status"] == expect.status and seen["api"] == route and seen["route"] == target
    if expect.answered:
        assert seen["error"] is None
    else:
        assert seen["error"]["code"] == expect.code and seen["cache"] == "miss", seen
    if fault != "dns-unresolved":
        assert reached(servers, fault, cell, question) >= 1
    # One failure leaves the breaker closed (two open it); a 429 is no failure at all.
    assert breaker(gateway, target) == "closed"

    # Then at once: the same question again (a failure was not kept, so it goes upstream again; an answer
    # was, and is a hit), and a new one twice (single flight shares no failure as an answer).
    before = reached(servers, fault, cell, question)
    with ThreadPoolExecutor(3) as pool:
        pending = [pool.submit(ask, gateway, route, cell, stream, q) for q in (question, twin, twin)]
        again, *twins = [job.result() for job in pending]
    for answer in (again, *twins):
        check_answer(route, expect, answer, timed=False)
        # a follower may go upstream after its leader; three answers' bytes go through at once
        assert answer.elapsed < within(2 * expect.waits + 3 * expect.carries), f"waited {answer.elapsed:.2f} s"
    if expect.answered:
        assert again.headers["x-firsttoken-cache"] == "hit"
        assert reached(servers, fault, cell, question) == before
    else:
        assert again.headers["x-firsttoken-cache"] == "miss"
        retried = journey(gateway, again.request_id)
        assert retried["error"]["code"] == expect.code and retried["attempts"] == 1
        if fault != "dns-unresolved":
            assert reached(servers, fault, cell, question) > before
    # The metrics: failures are failures, never successes. (Once all four are counted, all four ended.)
    counted(gateway, cell, (4.0, 0.0) if expect.answered else (0.0, 4.0))
    if not expect.answered and expect.status != 429:
        wait_until(lambda: breaker(gateway, target) == "open", f"the breaker of {target} to open")
    else:
        assert breaker(gateway, target) == "closed"

    if expect.status == 429:  # cooling: the alias that lists it first sends its next request elsewhere
        probe = ask(gateway, route, f"probe.{shape}.{cell_route}", stream, f"{question} (probe)")
        assert probe.status == 200 and probe.headers["x-firsttoken-route"].startswith("fault/healthy.probe")


@pytest.mark.parametrize("route", ROUTES)
def test_a_stream_its_heartbeats_started_ends_a_stall_with_the_routes_error_event(beating, servers, route) -> None:
    cell, expect = f"stall-first-byte.heartbeat.{route}", Expect(200, "upstream_timeout", True, BOUND_S)
    question = f"a question for {cell}"
    for attempt in range(2):  # and again: the failure was not kept
        answer = ask(beating, route, cell, True, question)
        check_answer(route, expect, answer)
        assert answer.body.startswith(b": keep-alive\n\n")  # the heartbeat went first
        assert answer.headers["x-firsttoken-cache"] == "miss"
        assert servers[0].asked(cell, question) == attempt + 1
        seen = journey(beating, answer.request_id)
        assert seen["status"] == 200 and seen["error"]["code"] == "upstream_timeout"
    counted(beating, cell, (0.0, 2.0))
