"""No input makes the gateway answer 500 or crash: every answer is a success or an OpenAI-format error."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CLIENT_KEY

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


@pytest.fixture(scope="module")
def http(gateway):
    with httpx.Client(base_url=gateway.url, timeout=10, headers={"Authorization": f"Bearer {CLIENT_KEY}"}) as client:
        yield client


def check(response: httpx.Response) -> None:
    assert response.status_code < 500 or response.status_code in (502, 504), response.text
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies, path=st.sampled_from(["/v1/chat/completions", "/v1/embeddings"]))
def test_random_json_bodies(http: httpx.Client, body: dict, path: str) -> None:
    check(http.post(path, json=body))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200))
def test_random_bytes(http: httpx.Client, raw: bytes) -> None:
    check(http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"}))


def test_gateway_still_serves_after_fuzzing(http: httpx.Client, gateway) -> None:
    assert http.get("/healthz").status_code == 200
    assert "Traceback" not in gateway.log() and "Exception in ASGI" not in gateway.log()
