"""Broken answers from a real upstream, through the real gateway with its edge cache on, with the openai SDK
as the client: no broken answer is ever kept or served from the cache, a cut stream always says so, a stream
request never gets a 200 that is not a stream, no upstream key reaches the client, a journey or the log, and
a whole answer's body is bounded between chunks and in total, not by one deadline for the whole."""

from __future__ import annotations

import itertools
import json
import sqlite3
import threading
import time

import httpx
import openai
import pytest

from conftest import ADMIN, ADMIN_KEY, CLIENT_KEY
from firsttoken.cache.key import exact_key
from support.faulty_answers import HELD, UPSTREAM_KEY
from support.gateway_process import GatewayProcess
from support.openai_upstream import UpstreamThread
from support.waiting import not_before, wait_until, within

BROKEN_WHOLE = ["not-json", "html", "cut-json"]
BROKEN_STREAMS = ["garbage-stream", "empty-stream", "no-done", "cut-stream", "no-finish", "done-with-id",
                  "empty-finish"]
KEY_LEAKS = ["key-in-stream", "key-in-answer", "key-escaped", "key-urlencoded", "key-split-stream"]
NOT_KEPT = ["finish-error", "error-beside", "index-list", "two-choices-one-cut", "key-split-in-two"]
HEADER_TOKEN = "hdr-token-0123456789-SECRET"  # an upstream whose credential is a header, not `key:`
BASIC_PASSWORD = "basic-pw-0123456789-SECRET"  # one whose credential is in its URL (sent as Basic)
QUESTION = itertools.count()
# A whole answer's bounds: pieces come DRIP_S apart, far inside IDLE_S however slow the machine, and
# six of them take longer than the idle bound (and than TOTAL_S) in all.
DRIP_S, IDLE_S, TOTAL_S = 0.4, 2.0, 1.5


@pytest.fixture(scope="module")
def upstream():
    """An upstream of this module's own: some of its requests carry credentials it does not expect, which
    the session's shared upstream counts against the tests that check the gateway's own."""
    with UpstreamThread() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(upstream, tmp_path_factory):
    faulty = {name: [f"fake/{name}"] for name in [*BROKEN_WHOLE, *BROKEN_STREAMS, *KEY_LEAKS, *NOT_KEPT,
                                                   "whole-for-stream", "key-in-headers", "event-error",
                                                   "error-not-first", "gzip-stream", "named-ping", "error-null",
                                                   "slow-finish-error"]}
    drip = f"drip-{DRIP_S * 1000:.0f}"
    # "fake": a held answer waits for as long as its test holds it
    settings = {"upstreams": {"fake": {"url": upstream.url, "key": UPSTREAM_KEY,
                                       "timeouts": {"first_byte": 5.0, "idle": 60.0}},
                              "steady": {"url": upstream.url, "key": UPSTREAM_KEY, "pool": {"warm": 0},
                                         "timeouts": {"first_byte": 5.0, "idle": IDLE_S}},
                              "short": {"url": upstream.url, "key": UPSTREAM_KEY, "pool": {"warm": 0},
                                        "timeouts": {"first_byte": 5.0, "idle": IDLE_S, "total": TOTAL_S}},
                              "hdr": {"url": upstream.url, "headers": {"Authorization": f"Bearer {HEADER_TOKEN}"},
                                      "pool": {"warm": 0}},
                              "basic": {"url": upstream.url.replace("://", f"://user:{BASIC_PASSWORD}@"),
                                        "pool": {"warm": 0}}},
                "models": {**faulty, "chat": ["fake/echo"], "drip": [f"steady/{drip}"],
                           "drip-short": [f"short/{drip}"]},
                "keys": [{"name": "app", "key": CLIENT_KEY}], "admin_key": ADMIN_KEY,
                "routing": {"hedge": {"enabled": False}, "retry_budget": 0},
                "cache": {"backend": "sqlite", "path": "cache.db", "semantic": False}}
    with GatewayProcess(settings, tmp_path_factory.mktemp("broken")) as running:
        yield running


def client(gateway: GatewayProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)


def question() -> list[dict]:
    return [{"role": "user", "content": f"question number {next(QUESTION)}"}]


def whole(gateway: GatewayProcess, model: str, messages: list[dict]) -> httpx.Response:
    return httpx.post(gateway.url + "/v1/chat/completions", headers={"authorization": f"Bearer {CLIENT_KEY}"},
                      json={"model": model, "messages": messages}, timeout=10)


def streamed(gateway: GatewayProcess, model: str, messages: list[dict]) -> tuple[httpx.Response, list[str]]:
    """The response and its SSE lines (read whole)."""
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", timeout=10,
                      headers={"authorization": f"Bearer {CLIENT_KEY}"},
                      json={"model": model, "messages": messages, "stream": True}) as response:
        return response, [line for line in response.iter_lines() if line]


def error_events(lines: list[str]) -> list[dict]:
    """The error objects among the stream's events, as a client reads them (whichever key comes first)."""
    events = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    return [event["error"] for event in events if "error" in event]


@pytest.mark.parametrize("model", BROKEN_WHOLE)
def test_a_200_that_is_no_answer_is_a_502_in_either_shape_and_never_cached(gateway, upstream, model) -> None:
    messages = question()
    before = upstream.stats.by_model[model]
    for _ in range(2):
        with pytest.raises(openai.APIStatusError) as failed:
            client(gateway).chat.completions.create(model=model, messages=messages)
        assert failed.value.status_code == 502 and failed.value.code == "upstream_bad_response"
        assert failed.value.response.headers["x-firsttoken-cache"] == "miss"
        response, lines = streamed(gateway, model, messages)  # never a 200 that is not a stream
        assert response.status_code == 502 and response.headers["content-type"] == "application/json"
        assert response.headers["x-firsttoken-cache"] == "miss"
    assert upstream.stats.by_model[model] == before + 4  # each one crossed to the upstream


@pytest.mark.parametrize("model", BROKEN_STREAMS)
def test_a_broken_or_cut_stream_says_so_and_is_never_cached(gateway, upstream, model) -> None:
    messages = question()
    for _ in range(2):
        with pytest.raises(openai.APIError) as broken:  # the SDK raises on the error event
            for _chunk in client(gateway).chat.completions.create(model=model, messages=messages, stream=True):
                pass
        assert broken.value.code == "upstream_stream_broken"
        response, lines = streamed(gateway, model, messages)
        assert response.headers["x-firsttoken-cache"] == "miss" and lines[-1] == "data: [DONE]"
        assert [e["code"] for e in error_events(lines)] == ["upstream_stream_broken"]
        journey = _journey(gateway, response.headers['x-request-id'])
        assert journey["error"]["code"] == "upstream_stream_broken" and journey["verdict"].startswith("broken")
        whole_response = whole(gateway, model, messages)  # asked whole: no 500, not a hit
        assert whole_response.status_code == 502 and whole_response.headers["x-firsttoken-cache"] == "miss"


def test_a_whole_answer_to_a_stream_request_goes_out_as_a_stream_and_is_kept(gateway, upstream) -> None:
    messages = question()
    chunks = list(client(gateway).chat.completions.create(model="whole-for-stream", messages=messages, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == \
        "a whole answer to a stream request"
    assert chunks[-1].choices[0].finish_reason == "stop"
    seen = upstream.stats.by_model["whole-for-stream"]
    response, lines = streamed(gateway, "whole-for-stream", messages)
    assert response.headers["x-firsttoken-cache"] == "hit" and not error_events(lines)
    assert whole(gateway, "whole-for-stream", messages).headers["x-firsttoken-cache"] == "hit"
    assert upstream.stats.by_model["whole-for-stream"] == seen


@pytest.mark.parametrize("model", KEY_LEAKS)
def test_an_upstream_key_quoted_anywhere_reaches_no_client_cache_journey_or_log(gateway, model) -> None:
    """Quoted plain, in JSON escapes or %-encoded; in an error, an error event or an answer; asked whole
    or streamed, and again (a cache hit, where the answer was kept)."""
    messages = question()
    seen, asked = [], []
    for _ in range(2):
        for stream in (True, False):
            if stream:
                response, lines = streamed(gateway, model, messages)
                text = "\n".join(lines)
            else:
                response = whole(gateway, model, messages)
                text = response.text
            seen.append(text)
            asked.append(response.headers["x-request-id"])
            seen.append(json.dumps(_journey(gateway, asked[-1])))
    rows = wait_until(lambda: _logged(gateway, asked), "the journey log's writer to write every request")
    seen.append(json.dumps(rows))
    with sqlite3.connect(gateway.workdir / "cache.db") as db:
        seen.append(repr(db.execute("SELECT body FROM answers").fetchall()))
    seen.append(gateway.log())
    assert "[redacted]" in "".join(seen)  # the key came, and went
    for text in seen:  # decoded, so that no spelling of the key hides it
        assert UPSTREAM_KEY[:10] not in text and UPSTREAM_KEY[:10] not in _decoded(text)


def _logged(gateway: GatewayProcess, request_ids: list[str]) -> list[tuple] | None:
    """The journey log's rows, once it holds every one of `request_ids`."""
    try:
        with sqlite3.connect(gateway.workdir / "firsttoken-journeys.db") as db:
            rows = db.execute("SELECT * FROM journeys").fetchall()
    except sqlite3.OperationalError:  # not created yet
        return None
    return rows if set(request_ids) <= {row[0] for row in rows} else None


def _decoded(text: str) -> str:
    from urllib.parse import unquote
    return unquote(text.encode().decode("unicode_escape", "replace"))


def test_named_error_events_and_error_objects_are_errors(gateway) -> None:
    for model, code in (("event-error", None), ("error-not-first", "crashed")):
        messages = question()
        with pytest.raises(openai.APIError):  # an error the SDK recognises, not a crash parsing it
            for _chunk in client(gateway).chat.completions.create(model=model, messages=messages, stream=True):
                pass
        response, lines = streamed(gateway, model, messages)
        assert response.headers["x-firsttoken-cache"] == "miss" and len(error_events(lines)) == 1
        journey = _journey(gateway, response.headers['x-request-id'])
        assert journey["error"] is not None and (code is None or journey["error"]["code"] == code)


def test_a_stream_with_a_choice_left_unfinished_is_not_kept(gateway) -> None:
    messages = question()
    for _ in range(2):
        response, lines = streamed(gateway, "two-choices-one-cut", messages)
        assert response.headers["x-firsttoken-cache"] == "miss"


def test_a_stream_compressed_against_our_asking_arrives_as_text(gateway) -> None:
    chunks = list(client(gateway).chat.completions.create(model="gzip-stream", messages=question(), stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "squeezed"


def test_an_upstream_key_in_a_refusal_and_its_headers_is_redacted(gateway) -> None:
    with pytest.raises(openai.RateLimitError) as refused:
        client(gateway).chat.completions.create(model="key-in-headers", messages=question())
    headers = refused.value.response.headers
    assert headers["retry-after"] == "1" and headers["x-ratelimit-key"] == "[redacted]; remaining=0"
    assert UPSTREAM_KEY[:10] not in refused.value.message and "[redacted]" in refused.value.message
    assert UPSTREAM_KEY[:10] not in gateway.log()


def test_a_whole_answer_is_bounded_between_chunks_not_by_one_deadline(gateway) -> None:
    """Six pieces 0.4 s apart take 2.4 s, more than the 2 s idle bound: each piece came in time."""
    started = time.monotonic()
    answer = client(gateway).chat.completions.create(model="drip", messages=question())
    assert answer.choices[0].message.content == "a slow but steady answer"
    assert not_before(time.monotonic() - started, 6 * DRIP_S) and 6 * DRIP_S > IDLE_S


def test_a_whole_answer_past_its_total_deadline_is_a_504_that_says_which(gateway) -> None:
    """The whole answer would take 2.4 s: a 504 that names the total bound is one that cut it short."""
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as late:
        client(gateway).chat.completions.create(model="drip-short", messages=question())
    took = time.monotonic() - started
    assert late.value.status_code == 504 and "timeouts.total" in late.value.message
    assert not_before(took, TOTAL_S) and took < within(TOTAL_S)


@pytest.mark.parametrize(("kind", "body", "stream"), [
    ("sse", b"data: {not json\n\n", False),  # a stream's events that do not fold into an answer
    ("json", b"<html>not an answer</html>", True),  # a whole answer that is not JSON, asked as a stream
    ("json", b'{"choices": "nonsense"}', True),
])
def test_a_stored_answer_that_cannot_be_replayed_is_dropped_and_the_request_goes_upstream(
        gateway, upstream, kind, body, stream) -> None:
    messages = question()
    request = {"model": "chat", "messages": messages}
    key = exact_key("app", ["fake/echo"], request)
    now = time.time()
    with sqlite3.connect(gateway.workdir / "cache.db") as db:  # damaged in the store, or kept by an older version
        db.execute("INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   (key, kind, body, "app", "fake/echo", now, now + 3600, len(body)))
    dropped = _dropped(gateway)
    echoes = upstream.stats.by_model["echo"]
    if stream:
        response, lines = streamed(gateway, "chat", messages)
        assert response.status_code == 200 and not error_events(lines)
    else:
        response = whole(gateway, "chat", messages)
        assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"]
    assert response.headers["x-firsttoken-cache"] == "miss"
    assert upstream.stats.by_model["echo"] == echoes + 1
    assert _dropped(gateway) == dropped + 1
    # the fresh answer takes its place (the writer flushes in the background)
    wait_until(lambda: whole(gateway, "chat", messages).headers["x-firsttoken-cache"] == "hit",
               "the fresh answer to be kept")


def _dropped(gateway: GatewayProcess) -> float:
    metrics = httpx.get(gateway.url + "/metrics", headers=ADMIN).text
    return next(float(line.split()[-1]) for line in metrics.splitlines()
                if line.startswith("firsttoken_cache_dropped_total"))


@pytest.mark.parametrize("model", NOT_KEPT)
def test_an_answer_that_failed_or_is_malformed_is_never_kept(gateway, model) -> None:
    messages = question()
    for stream in (True, False, True):
        response = streamed(gateway, model, messages)[0] if stream else whole(gateway, model, messages)
        assert response.headers["x-firsttoken-cache"] == "miss"
    assert "Traceback" not in gateway.log()


def test_healthy_streams_with_odd_but_harmless_parts_are_read_and_kept(gateway) -> None:
    """A named `event: ping` (which the SDK would read as a chunk, and fail on) is not passed on; an
    `"error": null` in every chunk is no error."""
    for model in ("named-ping", "error-null"):
        messages = question()
        for expected in ("miss", "hit"):
            raw = client(gateway).chat.completions.with_raw_response.create(model=model, messages=messages,
                                                                           stream=True)
            assert raw.headers["x-firsttoken-cache"] == expected
            text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
            assert text == "half an"
        assert _journey(gateway, raw.headers["x-request-id"])["error"] is None


@pytest.mark.parametrize(("upstream_name", "secret"), [("hdr", HEADER_TOKEN), ("basic", BASIC_PASSWORD)])
def test_a_credential_given_as_a_header_or_in_the_url_is_redacted_too(gateway, upstream_name, secret) -> None:
    import base64
    response = whole(gateway, f"{upstream_name}/auth-in-error", question())
    assert response.status_code == 502 and "[redacted]" in response.text
    sent_as = [secret, base64.b64encode(f"user:{secret}".encode()).decode()]
    journey = _journey(gateway, response.headers["x-request-id"])
    for text in (response.text, json.dumps(journey), gateway.log()):
        assert not any(form[:10] in text for form in sent_as)


def _journey(gateway: GatewayProcess, request_id: str) -> dict:
    """GET /v1/journeys/{request_id}, as the client key that asked."""
    headers = {"authorization": f"Bearer {CLIENT_KEY}"}
    return httpx.get(f"{gateway.url}/v1/journeys/{request_id}", headers=headers).json()


def test_requests_that_join_an_answer_not_to_keep_end_as_it_did_or_ask_themselves(gateway, upstream) -> None:
    """The first request's answer ends cleanly but says it failed: one that joined it as a stream has had it
    all and ends as it did (no error event); one that waits for a whole answer goes upstream itself."""
    messages = question()
    body = {"model": "slow-finish-error", "messages": messages}
    started: dict[str, httpx.Headers] = {}
    replies: dict[str, httpx.Response] = {}

    def post(name: str, stream: bool) -> None:
        with httpx.stream("POST", gateway.url + "/v1/chat/completions", json={**body, "stream": stream},
                          headers={"authorization": f"Bearer {CLIENT_KEY}"}, timeout=60) as response:
            started[name] = response.headers
            response.read()
            replies[name] = response

    before = upstream.stats.by_model["slow-finish-error"]
    threads = {name: threading.Thread(target=post, args=(name, name != "whole")) for name in ("leader", "whole",
                                                                                              "stream")}
    with HELD.shut():  # the leader's answer stops after its first word until the others have joined it
        threads["leader"].start()
        wait_until(lambda: upstream.stats.by_model["slow-finish-error"] == before + 1, "the leader upstream")
        threads["whole"].start()  # (it says nothing until the leader ends: it goes first, to be in time too)
        threads["stream"].start()
        wait_until(lambda: "stream" in started, "the stream that joined the leader to start")
    for thread in threads.values():
        thread.join(60)
    assert replies["stream"].headers["x-firsttoken-cache"] == "hit; joined"
    leader_text, follower_text = (r.text.rsplit(": server-timing", 1)[0] for r in (replies["leader"],
                                                                                  replies["stream"]))
    assert follower_text == leader_text and not error_events(replies["stream"].text.splitlines())
    assert replies["whole"].status_code == 200 and replies["whole"].headers["x-firsttoken-cache"] == "miss"
    assert upstream.stats.by_model["slow-finish-error"] == before + 2
