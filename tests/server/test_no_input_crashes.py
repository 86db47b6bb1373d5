"""No input makes the gateway answer 500 or crash: every answer is a success or an OpenAI-format error.

Hypothesis throws generated bodies, methods, paths and query strings at every route the gateway serves;
bodies past config's `limits` (nesting, messages, string sizes) get a 400 that names the setting, streamed
or not, before anything re-serialises them (orjson stops at 254 levels, and a 255-deep body was a 500).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import CLIENT_KEY, gateway_settings
from support.gateway_process import GatewayProcess
from support.waiting import PATIENCE_S
from support.wire_properties import messages_bodies, responses_bodies

AUTH = {"Authorization": f"Bearer {CLIENT_KEY}"}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12)
models = (st.sampled_from(["chat", "fake/echo", "fake/tools", "fake/inspect", "fake/error-400", "nope", ""])
          | json_values)
roles = st.sampled_from(["user", "system", "assistant", "tool", "x"]) | json_values
messages = st.lists(st.fixed_dictionaries({"role": roles,
                                           "content": st.text(max_size=30) | json_values}), max_size=3) | json_values
bodies = st.fixed_dictionaries({"model": models, "messages": messages},
                               optional={"stream": st.booleans() | json_values, "temperature": json_values,
                                         "stream_options": json_values, "tools": json_values,
                                         "max_tokens": json_values, "input": json_values})


def deep(depth: int, leaf: bytes = b'"x"') -> bytes:
    """`depth` levels of arrays and objects in turn, as JSON text (orjson would refuse to write it)."""
    opened, closed = b"", b""
    for level in range(depth):
        opened, closed = (opened + b"[", b"]" + closed) if level % 2 else (opened + b'{"k":', b"}" + closed)
    return opened + leaf + closed


def deep_body(field: str, depth: int, stream: bool = False) -> bytes:
    """A chat (or embeddings) request whose `field` holds `depth` levels of nesting, the body's own included."""
    flag = b"true" if stream else b"false"
    if field == "content":  # the body, messages, a message, its content: 4 levels
        return (b'{"model": "chat", "stream": %s, "messages": [{"role": "user", "content": [%s]}]}'
                % (flag, deep(depth - 4)))
    if field == "tools":  # the body, tools, a tool, its function, its parameters: 5 levels
        return (b'{"model": "chat", "stream": %s, "messages": [{"role": "user", "content": "hi"}], "tools": '
                b'[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": '
                b'%s}}}]}' % (flag, deep(depth - 5)))
    return b'{"model": "chat", "input": [%s]}' % deep(depth - 2)  # embeddings: the body, input: 2 levels


# Every route served, with and without /v1 where both are, and a few that are not.
PATHS = ["/v1/chat/completions", "/chat/completions", "/v1/embeddings", "/embeddings", "/v1/models", "/models",
         "/v1/responses", "/responses", "/openapi.json",
         "/v1/journeys", "/v1/routing", "/metrics", "/healthz", "/readyz", "/v1/journeys/", "/journeys",
         "/routing", "/v1", "/", "/v1/completions"]
paths = st.sampled_from(PATHS) | st.text(max_size=40).map(lambda tail: "/v1/journeys/" + quote(tail, safe=""))
methods = st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
queries = st.dictionaries(st.sampled_from(["limit", "stream", "model", "api-version"]) | st.text(max_size=8),
                          st.integers().map(str) | st.text(max_size=12), max_size=3)
payloads = (st.none() | bodies.map(lambda body: json.dumps(body).encode()) | st.binary(max_size=200)
            | st.builds(deep_body, st.sampled_from(["content", "tools", "input"]), st.integers(10, 3000),
                        st.booleans()))


@pytest.fixture(scope="module")
def http(gateway) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=PATIENCE_S, headers=AUTH) as client:
        yield client


@pytest.fixture(scope="module")
def bounded(upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A gateway with small bounds on messages and strings (the defaults need bodies over max_body_bytes)."""
    config = gateway_settings(upstream.url)
    config["limits"] = {**config["limits"], "max_messages": 50, "max_string_bytes": 4096}
    del config["cache"]  # as shipped: hostile input meets the edge cache and its embedding model too
    with GatewayProcess(config, tmp_path_factory.mktemp("bounded")) as running, \
            httpx.Client(base_url=running.url, timeout=PATIENCE_S, headers=AUTH) as client:
        yield client


def check(response: httpx.Response) -> None:
    """No 5xx but the upstream's (502, 504) and a not-ready /readyz (503); every error in OpenAI's shape."""
    allowed = (502, 504, 503) if response.request.url.path == "/readyz" else (502, 504)
    assert response.status_code < 500 or response.status_code in allowed, response.text
    if response.status_code >= 400 and response.request.method != "HEAD":
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"]


def refused(response: httpx.Response, code: str, setting: str, param: str | None) -> None:
    check(response)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", code, param)
    assert f"limits.{setting}" in error["message"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies, path=st.sampled_from(["/v1/chat/completions", "/v1/embeddings"]))
@example(body={"model": "chat", "messages": 0, "input": "hi"}, path="/v1/embeddings")  # its limits read messages
def test_random_json_bodies(http: httpx.Client, body: dict, path: str) -> None:
    check(http.post(path, json=body))


def anthropic_shaped(response: httpx.Response) -> None:
    """No 5xx but the upstream's; every error in Anthropic's shape, as the Messages route promises."""
    assert response.status_code < 500 or response.status_code in (502, 504), response.text
    if response.status_code >= 400:
        error = response.json()
        assert error["type"] == "error" and set(error["error"]) >= {"type", "message"} and error["error"]["message"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=messages_bodies, model=models, stream=st.booleans())
def test_random_messages_bodies(http: httpx.Client, body: dict, model: object, stream: bool) -> None:
    anthropic_shaped(http.post("/v1/messages", json={**body, "model": model, "stream": stream}))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=responses_bodies, model=models, stream=st.booleans())
def test_random_responses_bodies(http: httpx.Client, body: dict, model: object, stream: bool) -> None:
    check(http.post("/v1/responses", json={**body, "model": model, "stream": stream, "store": False}))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200))
def test_random_bytes(http: httpx.Client, raw: bytes) -> None:
    check(http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"}))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=methods, path=paths, query=queries, payload=payloads)
def test_every_route(http: httpx.Client, method: str, path: str, query: dict[str, str],
                     payload: bytes | None) -> None:
    check(http.request(method, path, params=query, content=payload,
                       headers={"content-type": "application/json"} if payload is not None else {}))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["content", "tools", "input"]), depth=st.integers(6, 3000), stream=st.booleans(),
       prefix=st.sampled_from(["/v1", ""]))
def test_deep_bodies(http: httpx.Client, field: str, depth: int, stream: bool, prefix: str) -> None:
    path = prefix + ("/embeddings" if field == "input" else "/chat/completions")
    response = http.post(path, content=deep_body(field, depth, stream), headers={"content-type": "application/json"})
    check(response)
    if depth > 64:
        assert response.status_code == 400 and response.json()["error"]["code"] == "too_deep"


@pytest.mark.parametrize("depth", [255, 2000])
@pytest.mark.parametrize("field", ["content", "tools", "input"])
@pytest.mark.parametrize("stream", [False, True])
def test_deep_nesting_is_a_400(http: httpx.Client, depth: int, field: str, stream: bool) -> None:
    path = "/v1/embeddings" if field == "input" else "/v1/chat/completions"
    param = None if depth > 1024 else ("messages" if field == "content" else field)  # orjson's own bound: 1024
    refused(http.post(path, content=deep_body(field, depth, stream), headers={"content-type": "application/json"}),
            "too_deep", "max_json_depth", param)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/chat/completions"])
def test_nesting_within_the_bound_is_served(http: httpx.Client, path: str) -> None:
    # 64 levels in all, the body's own included: the upstream gets it, re-serialised
    response = http.post(path, content=deep_body("tools", 64), headers={"content-type": "application/json"})
    check(response)
    assert response.status_code == 200, response.text
    refused(http.post(path, content=deep_body("tools", 65), headers={"content-type": "application/json"}),
            "too_deep", "max_json_depth", "tools")


@pytest.mark.parametrize("stream", [False, True])
def test_long_strings(bounded: httpx.Client, stream: bool) -> None:
    def chat(text: str) -> httpx.Response:
        return bounded.post("/v1/chat/completions", json={"model": "chat", "stream": stream,
                                                          "messages": [{"role": "user", "content": text}]})

    fits = chat("é" * 2048)  # 4096 bytes of UTF-8
    assert fits.status_code == 200, fits.text
    refused(chat("é" * 2049), "string_too_long", "max_string_bytes", "messages")
    refused(bounded.post("/v1/embeddings", json={"model": "chat", "input": ["ok", "x" * 5000]}),
            "string_too_long", "max_string_bytes", "input")
    refused(bounded.post("/v1/chat/completions", json={"model": "chat", "k" * 5000: 1,
                                                       "messages": [{"role": "user", "content": "hi"}]}),
            "string_too_long", "max_string_bytes", None)


@pytest.mark.parametrize("stream", [False, True])
def test_many_messages(bounded: httpx.Client, stream: bool) -> None:
    def chat(count: int) -> httpx.Response:
        return bounded.post("/v1/chat/completions", json={"model": "chat", "stream": stream,
                                                          "messages": [{"role": "user", "content": "hi"}] * count})

    assert chat(50).status_code == 200
    refused(chat(51), "too_many_messages", "max_messages", "messages")
    refused(bounded.post("/v1/embeddings", json={"model": "chat", "input": ["hi"] * 51}),
            "too_many_inputs", "max_messages", "input")


def test_gateway_still_serves_after_fuzzing(http: httpx.Client, gateway) -> None:
    assert http.get("/healthz").status_code == 200
    assert "Traceback" not in gateway.log() and "Exception in ASGI" not in gateway.log()
