"""The gateway through the real openai SDK: streaming, non-streaming, tools, and every error class."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from conftest import CLIENT_KEY
from support.openai_upstream import UPSTREAM_KEY

USER = [{"role": "user", "content": "hello from Lagos"}]


@pytest.fixture()
def client(gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)


def test_non_streaming_answer_and_headers(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="chat", messages=USER)
    completion = raw.parse()
    assert completion.choices[0].message.content == "echo: hello from Lagos"
    assert completion.usage is not None and completion.usage.prompt_tokens == 10
    assert raw.headers["x-request-id"].startswith("req_")
    timing = raw.headers["server-timing"]
    for phase in ("gateway", "cache", "connect", "ttfb"):
        assert f"{phase};dur=" in timing
    assert raw.headers["x-firsttoken-route"] == "fake/echo"
    assert raw.headers["x-firsttoken-cache"] == "bypass"


def test_streaming_tokens_arrive_as_chunks(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model="chat", messages=USER, stream=True)
    pieces = [c.choices[0].delta.content for c in stream if c.choices]
    assert "".join(p or "" for p in pieces) == "echo: hello from Lagos"
    assert len([p for p in pieces if p]) == 4  # one chunk per word: forwarded, never merged


def test_usage_chunk_only_when_asked(client: openai.OpenAI, upstream) -> None:
    plain = list(client.chat.completions.create(model="chat", messages=USER, stream=True))
    assert all(c.choices for c in plain), "the usage chunk must be stripped when the client did not ask"
    assert upstream.stats.last_body["stream_options"] == {"include_usage": True}  # but we asked upstream
    asked = list(client.chat.completions.create(model="chat", messages=USER, stream=True,
                                                stream_options={"include_usage": True}))
    assert not asked[-1].choices and asked[-1].usage.completion_tokens == 4


def test_every_field_passes_through(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="fake/inspect", messages=USER, seed=7, logprobs=True, top_logprobs=2,
        response_format={"type": "json_object"}, reasoning_effort="low",
        extra_body={"some_vendor_extension": {"nested": [1, 2.5, None]}})
    received = json.loads(completion.choices[0].message.content)
    assert received["seed"] == 7 and received["logprobs"] is True and received["top_logprobs"] == 2
    assert received["response_format"] == {"type": "json_object"}
    assert received["reasoning_effort"] == "low"
    assert received["some_vendor_extension"] == {"nested": [1, 2.5, None]}
    assert received["model"] == "inspect"


CITY = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOLS = [{"type": "function", "function": {"name": "weather", "description": "Weather in a city", "parameters": CITY}}]


def test_tool_calls_non_streaming(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="fake/tools", messages=USER, tools=TOOLS)
    call = completion.choices[0].message.tool_calls[0]
    assert call.function.name == "weather" and json.loads(call.function.arguments) == {"city": "Lagos"}
    assert completion.choices[0].finish_reason == "tool_calls"


def test_tool_calls_streaming(client: openai.OpenAI) -> None:
    arguments, names = "", []
    for chunk in client.chat.completions.create(model="fake/tools", messages=USER, tools=TOOLS, stream=True):
        for call in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            names += [call.function.name] if call.function.name else []
            arguments += call.function.arguments or ""
    assert names == ["weather"] and json.loads(arguments) == {"city": "Lagos"}


def test_models_lists_aliases_and_upstream_models(client: openai.OpenAI) -> None:
    ids = {m.id for m in client.models.list()}
    assert {"chat", "chat-with-fallback", "fake/echo", "fake/tools"} <= ids


def test_embeddings_pass_through(client: openai.OpenAI) -> None:
    result = client.embeddings.create(model="fake/embed", input=["a", "b"])
    assert len(result.data) == 2 and result.data[0].embedding == [0.1, 0.2, 0.3]


def test_fallback_to_next_target_when_first_is_unreachable(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="chat-with-fallback", messages=USER)
    assert raw.parse().choices[0].message.content == "echo: hello from Lagos"
    assert raw.headers["x-firsttoken-route"] == "fake/echo"


def test_fallback_on_upstream_503(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model="flaky", messages=USER, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "echo: hello from Lagos"


# --- errors, each as the SDK's own exception class ------------------------------------------------

def test_missing_field_is_400_naming_it(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="chat", messages=[])
    assert info.value.status_code == 400 and info.value.body["param"] == "messages"


def test_wrong_type_is_400_naming_it(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="chat", messages=USER, temperature="hot")  # type: ignore[arg-type]
    assert info.value.body["param"] == "temperature" and "number" in info.value.message


def test_unknown_model_is_404_listing_aliases(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-9", messages=USER)
    assert "chat" in info.value.message and "chat-with-fallback" in info.value.message
    assert info.value.body["code"] == "model_not_found"


def test_model_names_must_be_printable(gateway) -> None:
    response = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "fake/x\ny", "messages": USER},
                          headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    assert response.status_code == 400 and response.json()["error"]["param"] == "model"


def test_upstream_redirect_is_not_followed(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="fake/redirect", messages=USER)
    assert info.value.status_code == 502 and info.value.body["code"] == "upstream_redirect"


def test_upstream_refusing_our_key_is_not_the_clients_401(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="fake/error-401", messages=USER)
    assert info.value.status_code == 502 and info.value.body["code"] == "upstream_auth_failed"
    assert "upstreams.fake.key" in info.value.message


def test_errors_carry_the_gateway_headers(gateway) -> None:
    response = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "chat", "messages": USER})
    assert response.status_code == 401
    for name in ("x-request-id", "server-timing", "x-firsttoken-cache", "x-firsttoken-route"):
        assert name in response.headers
    assert "gateway;dur=" in response.headers["server-timing"]


def test_bad_client_key_is_401(gateway) -> None:
    bad = openai.OpenAI(base_url=gateway.url + "/v1", api_key="not-a-key-at-all", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="chat", messages=USER)


def test_body_over_limit_is_413(client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "x" * 70_000}])
    assert info.value.status_code == 413 and "max_body_bytes" in info.value.message


def test_upstream_rate_limit_passes_through(client: openai.OpenAI) -> None:
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model="fake/error-429", messages=USER)
    assert "synthetic error 429" in info.value.message
    assert info.value.response.headers["retry-after"] == "7"


def test_upstream_4xx_passes_through_with_its_message(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="fake/error-400", messages=USER, stream=True)
    assert "synthetic error 400" in info.value.message and info.value.body["code"] == "synthetic_400"


def test_unreachable_upstream_is_502(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="only-dead", messages=USER)
    assert info.value.status_code == 502 and "unreachable" in info.value.message


def test_upstream_timeout_is_504(client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="fake/hang", messages=USER)
    assert info.value.status_code == 504 and "first_byte" in info.value.message


def test_stream_timeout_after_heartbeats_is_an_error_event(gateway) -> None:
    lines = _raw_stream(gateway, {"model": "fake/hang", "messages": USER, "stream": True})
    assert ": keep-alive" in lines  # heartbeats kept the idle stream open
    errors = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    assert errors and errors[-1]["error"]["code"] == "upstream_timeout"
    assert lines[-1] == "data: [DONE]"


def test_failure_mid_stream_is_one_error_event_then_done(client: openai.OpenAI, gateway) -> None:
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(model="fake/fail-midstream", messages=USER, stream=True):
            pass
    lines = _raw_stream(gateway, {"model": "fake/fail-midstream", "messages": USER, "stream": True})
    errors = [line for line in lines if line.startswith('data: {"error"')]
    assert len(errors) == 1 and lines[-1] == "data: [DONE]"


def test_heartbeat_while_waiting_for_first_token(gateway) -> None:
    # 1.2 s of waiting: heartbeats 0.3 s apart, two of them even with the gateway 0.6 s behind, and 0.8 s
    # under the 2 s first-byte timeout (conftest.py) for the upstream's own lateness.
    lines = _raw_stream(gateway, {"model": "fake/sleep-1200", "messages": USER, "stream": True})
    assert lines.count(": keep-alive") >= 2
    assert any('"echo:"' in line for line in lines)


def test_stream_ends_with_server_timing_and_cost_comments(gateway) -> None:
    lines = _raw_stream(gateway, {"model": "chat", "messages": USER, "stream": True})
    assert lines[-1] == "data: [DONE]"
    assert lines[-3].startswith(": server-timing ttft;dur=") and ", e2e;dur=" in lines[-3]
    # the fake upstream's model has no price: its tokens are counted all the same
    assert lines[-2].startswith(": x-firsttoken-cost usd=unknown; input=")


def test_malformed_json_is_400(gateway) -> None:
    response = httpx.post(gateway.url + "/v1/chat/completions", content=b"{not json",
                          headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"


def test_unknown_route_and_method(gateway) -> None:
    assert httpx.get(gateway.url + "/v1/nothing").json()["error"]["code"] == "unknown_route"
    response = httpx.get(gateway.url + "/v1/chat/completions")
    assert response.status_code == 405 and response.headers["allow"] == "POST"


def test_health_and_readiness(gateway) -> None:
    assert httpx.get(gateway.url + "/healthz").status_code == 200
    ready = httpx.get(gateway.url + "/readyz")
    assert ready.status_code == 200 and ready.json()["upstreams"]["fake"]["warm"] is True


def test_upstream_key_never_leaks(client: openai.OpenAI, gateway, upstream) -> None:
    client.chat.completions.create(model="chat", messages=USER)
    for model in ("only-dead", "fake/error-400", "fake/hang"):
        try:
            client.chat.completions.create(model=model, messages=USER)
        except openai.APIError as exc:
            assert UPSTREAM_KEY not in str(exc.body)
    assert UPSTREAM_KEY not in httpx.get(gateway.url + "/v1/models",
                                         headers={"Authorization": f"Bearer {CLIENT_KEY}"}).text
    assert UPSTREAM_KEY not in gateway.log()
    assert upstream.stats.bad_auth == 0  # and yet every request reached the upstream with it


def _raw_stream(gateway, body: dict) -> list[str]:
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, timeout=20,
                      headers={"Authorization": f"Bearer {CLIENT_KEY}"}) as response:
        assert response.status_code == 200
        return [line for line in response.iter_lines() if line]


def test_a_model_by_its_id(client: openai.OpenAI) -> None:
    assert client.models.retrieve("chat").targets  # an alias, with where it goes
    assert client.models.retrieve("fake/echo").owned_by == "fake"
    assert client.models.retrieve("fake/not-listed-but-routable").id == "fake/not-listed-but-routable"
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("gpt-9")
    assert missing.value.body["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nowhere/gpt-9")
