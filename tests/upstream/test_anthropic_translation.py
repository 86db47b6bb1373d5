"""The Anthropic adapter: OpenAI chat completions to Messages requests and back, streamed and not,
checked piece by piece and then against a test upstream whose fidelity the real anthropic SDK vouches for."""

from __future__ import annotations

import re
from typing import Any

import aiohttp
import anthropic
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from firsttoken.config import Upstream
from firsttoken.errors import GatewayError
from firsttoken.upstream.adapter import UpstreamRequest
from firsttoken.upstream.anthropic import AnthropicAdapter, AnthropicStream
from support.anthropic_server import AnthropicTestServer, run_anthropic_server

Json = dict[str, Any]
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def adapter(url: str = "https://api.anthropic.com/v1", key: str | None = "test-key",
            **settings: Any) -> AnthropicAdapter:
    return AnthropicAdapter("claude", Upstream(url=url, api="anthropic", key=key, **settings))


def translate(body: Json, stream: bool = False) -> Json:
    return orjson.loads(adapter().chat(body, "claude-test-1", stream).data)


def user(content: Any) -> Json:
    return {"role": "user", "content": content}


def refused(body: Json) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        translate(body)
    assert caught.value.status == 400 and caught.value.type == "invalid_request_error"
    return caught.value


# --- requests ----------------------------------------------------------------------------------

def test_url_and_headers() -> None:
    request = adapter(headers={"anthropic-beta": "x"}).chat({"messages": [user("hi")]}, "claude-test-1", False)
    assert request.url == "https://api.anthropic.com/v1/messages"
    assert request.headers["x-api-key"] == "test-key"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["anthropic-beta"] == "x"
    assert "Authorization" not in request.headers
    keyless = adapter(key=None, api_version="2024-01-01").chat({"messages": [user("hi")]}, "m", False)
    assert "x-api-key" not in keyless.headers and keyless.headers["anthropic-version"] == "2024-01-01"


def test_probe_lists_models_with_auth() -> None:
    url, headers = adapter().probe()
    assert url == "https://api.anthropic.com/v1/models"
    assert headers == {"anthropic-version": "2023-06-01", "x-api-key": "test-key"}
    assert adapter().probe_lists_models


def test_embeddings_are_refused() -> None:
    with pytest.raises(GatewayError) as caught:
        adapter().embeddings({"input": "x"}, "m")
    assert caught.value.status == 400 and caught.value.param == "model"


def test_minimal_request_gets_model_and_default_max_tokens() -> None:
    assert translate({"messages": [user("hi")]}) == {
        "model": "claude-test-1", "messages": [user("hi")], "max_tokens": 4096}
    assert translate({"messages": [user("hi")]}, stream=True)["stream"] is True


def test_system_and_developer_messages_are_hoisted_and_joined() -> None:
    out = translate({"messages": [{"role": "system", "content": "Be brief."}, user("hi"),
                                  {"role": "developer", "content": [{"type": "text", "text": "Be kind."}]}]})
    assert out["system"] == "Be brief.\n\nBe kind."
    assert out["messages"] == [user("hi")]


def test_multipart_content_and_images() -> None:
    parts = [{"type": "text", "text": "What is this?"},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
             {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "high"}}]
    assert translate({"messages": [user(parts)]})["messages"][0]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}}]


@pytest.mark.parametrize("url", ["ftp://example.com/x.png", "data:image/png,notbase64", "data:;base64,AAAA"])
def test_unusable_image_urls_are_refused(url: str) -> None:
    error = refused({"messages": [user([{"type": "image_url", "image_url": {"url": url}}])]})
    assert error.param == "messages[0].content[0].image_url.url"


def test_unsupported_part_is_refused() -> None:
    error = refused({"messages": [user([{"type": "input_audio", "input_audio": {}}])]})
    assert error.param == "messages[0].content[0].type"


def test_tool_calls_and_results_become_blocks() -> None:
    calls = [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Lagos"}'}},
             {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": ""}}]
    out = translate({"messages": [
        user("Weather and time?"),
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_1", "content": "31C"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "14:00"}]},
        user("Thanks; and tomorrow?")]})
    assert out["messages"] == [
        user("Weather and time?"),
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Lagos"}},
            {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {}}]},
        user([{"type": "tool_result", "tool_use_id": "call_1", "content": "31C"},
              {"type": "tool_result", "tool_use_id": "call_2", "content": [{"type": "text", "text": "14:00"}]},
              {"type": "text", "text": "Thanks; and tomorrow?"}])]


def test_consecutive_same_role_messages_are_merged() -> None:
    out = translate({"messages": [user("a"), user([{"type": "text", "text": "b"}]),
                                  {"role": "assistant", "content": "c"}, {"role": "assistant", "content": None},
                                  user("d")]})
    assert out["messages"] == [user([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
                               {"role": "assistant", "content": "c"}, user("d")]


@pytest.mark.parametrize(("message", "param"), [
    ({"role": "function", "name": "f", "content": "x"}, "messages[0].role"),
    ({"role": "wizard", "content": "x"}, "messages[0].role"),
    ({"role": "tool", "content": "x"}, "messages[0].tool_call_id"),
    ({"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                           "function": {"name": "f", "arguments": "{not json"}}]},
     "messages[0].tool_calls[0].function.arguments"),
    ({"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                           "function": {"name": "f", "arguments": "[1, 2]"}}]},
     "messages[0].tool_calls[0].function.arguments"),
    ({"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]},
     "messages[0].tool_calls[0]"),
    ({"role": "user", "content": 42}, "messages[0].content"),
    ({"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]},
     "messages[0].content"),
])
def test_invalid_messages_name_the_field(message: Json, param: str) -> None:
    assert refused({"messages": [message]}).param == param


def test_empty_messages_are_refused() -> None:
    assert refused({"messages": []}).param == "messages"


def test_tools_and_tool_choice() -> None:
    noop = {"type": "function", "function": {"name": "noop"}}
    out = translate({"messages": [user("hi")], "tools": [WEATHER_TOOL, noop], "tool_choice": "required"})
    assert out["tools"] == [
        {"name": "get_weather", "description": "Weather for a city",
         "input_schema": WEATHER_TOOL["function"]["parameters"]},
        {"name": "noop", "input_schema": {"type": "object", "properties": {}}}]
    assert out["tool_choice"] == {"type": "any"}


@pytest.mark.parametrize(("choice", "parallel", "expected"), [
    ("auto", None, {"type": "auto"}),
    ("required", None, {"type": "any"}),
    ("none", None, {"type": "none"}),
    ({"type": "function", "function": {"name": "get_weather"}}, None, {"type": "tool", "name": "get_weather"}),
    (None, None, None),
    (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
    ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
    ("none", False, {"type": "none"}),
    ("auto", True, {"type": "auto"}),
])
def test_tool_choice_mapping(choice: Any, parallel: bool | None, expected: Json | None) -> None:
    body: Json = {"messages": [user("hi")], "tools": [WEATHER_TOOL], "tool_choice": choice,
                  "parallel_tool_calls": parallel}
    assert translate(body).get("tool_choice") == expected


def test_tool_choice_without_tools_is_dropped_and_bad_ones_refused() -> None:
    assert "tool_choice" not in translate({"messages": [user("hi")], "tool_choice": "auto"})
    sometimes = {"messages": [user("hi")], "tools": [WEATHER_TOOL], "tool_choice": "sometimes"}
    assert refused(sometimes).param == "tool_choice"
    assert refused({"messages": [user("hi")], "tools": [{"type": "code_interpreter"}]}).param == "tools[0]"


def test_sampling_stop_user_and_dropped_fields() -> None:
    out = translate({"messages": [user("hi")], "temperature": 0.2, "top_p": 0.9, "top_k": 5, "stop": "END",
                     "user": "u-42", "max_tokens": 100, "n": 1, "presence_penalty": 0.5, "frequency_penalty": 0.1,
                     "seed": 7, "logprobs": False, "response_format": {"type": "text"}, "logit_bias": {},
                     "store": False, "stream_options": {"include_usage": True}, "service_tier": "auto"})
    assert out == {"model": "claude-test-1", "messages": [user("hi")], "max_tokens": 100, "temperature": 0.2,
                   "top_p": 0.9, "top_k": 5, "stop_sequences": ["END"], "metadata": {"user_id": "u-42"}}
    assert translate({"messages": [user("hi")], "stop": ["a", "b"]})["stop_sequences"] == ["a", "b"]
    assert refused({"messages": [user("hi")], "stop": [1]}).param == "stop"


def test_max_completion_tokens_wins_and_bad_limits_are_refused() -> None:
    assert translate({"messages": [user("hi")], "max_tokens": 50, "max_completion_tokens": 70})["max_tokens"] == 70
    assert refused({"messages": [user("hi")], "max_tokens": 0}).param == "max_tokens"
    assert refused({"messages": [user("hi")], "max_completion_tokens": "9"}).param == "max_completion_tokens"


@pytest.mark.parametrize(("effort", "budget", "max_tokens"), [
    ("low", 1024, 4096), ("minimal", 1024, 4096), ("medium", 4096, 8192), ("high", 16384, 20480)])
def test_reasoning_effort_becomes_a_thinking_budget(effort: str, budget: int, max_tokens: int) -> None:
    out = translate({"messages": [user("hi")], "reasoning_effort": effort})
    assert out["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert out["max_tokens"] == max_tokens > budget


def test_thinking_field_passes_and_keeps_room_for_the_answer() -> None:
    thinking = {"type": "enabled", "budget_tokens": 2000}
    out = translate({"messages": [user("hi")], "thinking": thinking, "max_tokens": 500})
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 2000} and out["max_tokens"] == 2500
    roomy = translate({"messages": [user("hi")], "thinking": {"type": "enabled", "budget_tokens": 2000},
                       "max_tokens": 9000, "reasoning_effort": "high"})
    assert roomy["thinking"]["budget_tokens"] == 2000 and roomy["max_tokens"] == 9000  # thinking wins over effort
    assert "thinking" not in translate({"messages": [user("hi")], "reasoning_effort": "none"})
    assert refused({"messages": [user("hi")], "reasoning_effort": "extreme"}).param == "reasoning_effort"
    assert refused({"messages": [user("hi")], "thinking": {"type": "enabled"}}).param == "thinking.budget_tokens"


# --- answers -----------------------------------------------------------------------------------

def message(content: list[Json], stop_reason: str = "end_turn", **usage: int) -> bytes:
    return orjson.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test-1",
                         "content": content, "stop_reason": stop_reason, "stop_sequence": None,
                         "usage": {"input_tokens": 10, "output_tokens": 5, **usage}})


def test_text_answer() -> None:
    out = orjson.loads(adapter().chat_response(message([{"type": "text", "text": "Hello"},
                                                        {"type": "text", "text": " there"}])))
    assert out["id"] == "msg_1" and out["object"] == "chat.completion" and out["model"] == "claude-test-1"
    assert isinstance(out["created"], int)
    assert out["choices"] == [{"index": 0, "logprobs": None, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": "Hello there"}}]
    assert out["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
                            "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0}}


def test_tool_use_and_thinking_answer_with_cache_usage() -> None:
    body = message([{"type": "thinking", "thinking": "Hmm.", "signature": "s"},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Lagos"}}],
                   "tool_use", cache_creation_input_tokens=100, cache_read_input_tokens=1000)
    out = orjson.loads(adapter().chat_response(body))
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert out["choices"][0]["message"] == {
        "role": "assistant", "content": None, "reasoning_content": "Hmm.",
        "tool_calls": [{"id": "toolu_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Lagos"}'}}]}
    assert out["usage"] == {"prompt_tokens": 1110, "completion_tokens": 5, "total_tokens": 1115,
                            "prompt_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 100}}


@pytest.mark.parametrize(("stop_reason", "finish"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("tool_use", "tool_calls"),
    ("refusal", "content_filter"), ("pause_turn", "stop"), ("model_context_window_exceeded", "length"),
    ("something_new", "stop")])
def test_finish_reasons(stop_reason: str, finish: str) -> None:
    out = orjson.loads(adapter().chat_response(message([{"type": "text", "text": "x"}], stop_reason)))
    assert out["choices"][0]["finish_reason"] == finish


def test_a_non_message_answer_is_a_bad_gateway() -> None:
    with pytest.raises(GatewayError) as caught:
        adapter().chat_response(b"<html>proxy error for test-key</html>")
    assert caught.value.status == 502 and "test-key" not in caught.value.message


def test_anthropic_errors_keep_their_message() -> None:
    body = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    error = adapter().error(529, body)  # Anthropic's non-standard "overloaded" is answered as 503
    assert (error.status, error.type, error.message) == (503, "overloaded_error", "Overloaded")


# --- streams -----------------------------------------------------------------------------------

def event(data: Json, end: str = "\n", space: str = " ") -> bytes:
    return f"event: {data['type']}{end}data:{space}".encode() + orjson.dumps(data)


def decoded(events: list[bytes]) -> list[Json | str]:
    out: list[Json | str] = []
    for raw in events:
        assert raw.startswith(b"data: ") and raw.endswith(b"\n\n"), raw
        payload = raw[len(b"data: "):-2]
        out.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
    return out


TOOL_STREAM: list[Json] = [
    {"type": "message_start", "message": {"id": "msg_7", "type": "message", "role": "assistant", "model": "claude-x",
                                          "content": [], "stop_reason": None, "stop_sequence": None,
                                          "usage": {"input_tokens": 20, "cache_creation_input_tokens": 2,
                                                    "cache_read_input_tokens": 8, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hmm."}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Checking."}},
    {"type": "content_block_stop", "index": 1},
    {"type": "content_block_start", "index": 2,
     "content_block": {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {}}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"city":'}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '"Lagos"}'}},
    {"type": "content_block_stop", "index": 2},
    {"type": "content_block_start", "index": 3,
     "content_block": {"type": "tool_use", "id": "toolu_b", "name": "get_time", "input": {}}},
    {"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
    {"type": "content_block_stop", "index": 3},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
     "usage": {"output_tokens": 42}},
    {"type": "message_stop"},
]


@pytest.mark.parametrize(("end", "space"), [("\n", " "), ("\r\n", " "), ("\n", ""), ("\r\n", "")])
def test_stream_translation(end: str, space: str) -> None:
    translator = adapter().stream_translator(include_usage=True)
    out = decoded([chunk for data in TOOL_STREAM for chunk in translator.feed(event(data, end, space))])
    assert translator.finish() == []
    *chunks, final, done = out
    assert done == "[DONE]"
    assert all(c["id"] == "msg_7" and c["model"] == "claude-x" and c["object"] == "chat.completion.chunk"
               and c["created"] == chunks[0]["created"] for c in [*chunks, final])
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant", "content": ""},
        {"reasoning_content": "Hmm."},
        {"content": "Checking."},
        {"tool_calls": [{"index": 0, "id": "toolu_a", "type": "function",
                         "function": {"name": "get_weather", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '"Lagos"}'}}]},
        {"tool_calls": [{"index": 1, "id": "toolu_b", "type": "function",
                         "function": {"name": "get_time", "arguments": ""}}]},
        {"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]},
        {}]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 8 + ["tool_calls"]
    assert final["choices"] == []
    assert final["usage"] == {"prompt_tokens": 30, "completion_tokens": 42, "total_tokens": 72,
                              "prompt_tokens_details": {"cached_tokens": 8, "cache_write_tokens": 2}}


def test_stream_without_usage_ends_with_done_only() -> None:
    translator = adapter().stream_translator(include_usage=False)
    out = [chunk for data in TOOL_STREAM for chunk in translator.feed(event(data))]
    assert out[-1] == b"data: [DONE]\n\n"
    assert all(b'"usage"' not in chunk for chunk in out)


def test_stream_error_event() -> None:
    translator = adapter().stream_translator(include_usage=True)
    translator.feed(event(TOOL_STREAM[0]))
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert decoded(translator.feed(event(error))) == [
        {"error": {"message": "Overloaded", "type": "overloaded_error", "param": None, "code": None}}, "[DONE]"]
    assert translator.feed(event({"type": "message_stop"})) == [] and translator.finish() == []


def test_stream_that_ends_early_is_finished_with_an_error() -> None:
    translator = adapter().stream_translator(include_usage=True)
    translator.feed(event(TOOL_STREAM[0]))
    first, done = decoded(translator.finish())
    assert "ended the stream early" in first["error"]["message"] and done == "[DONE]"
    assert translator.finish() == []


def test_stream_ignores_comments_and_refuses_garbage() -> None:
    translator = AnthropicStream(include_usage=False)
    assert translator.feed(b": keep-alive") == [] and translator.feed(b"event: ping") == []
    first, done = decoded(translator.feed(b"event: content_block_delta\ndata: {oops"))
    assert "not a JSON object" in first["error"]["message"] and done == "[DONE]"


@given(st.lists(st.text(min_size=1), max_size=8))
def test_streamed_text_arrives_whole(pieces: list[str]) -> None:
    translator = AnthropicStream(include_usage=False)
    events = [TOOL_STREAM[0], TOOL_STREAM[6]]  # message_start, then a text block's start
    events += [{"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": p}} for p in pieces]
    out = decoded([chunk for data in events for chunk in translator.feed(event(data))])
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in out) == "".join(pieces)


# --- against the test upstream -----------------------------------------------------------------

@pytest.fixture
async def server() -> Any:
    async with run_anthropic_server() as running:
        yield running


EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


async def send(request: UpstreamRequest) -> tuple[int, bytes, list[bytes]]:
    """POST as the gateway would; the body, and its SSE events split on blank lines."""
    async with aiohttp.ClientSession() as session:
        async with session.post(request.url, headers=request.headers, data=request.data) as response:
            events, buffer, body = [], b"", b""
            async for data in response.content.iter_any():
                body += data
                buffer += data
                while match := EVENT_END.search(buffer):
                    events.append(buffer[:match.start()])
                    buffer = buffer[match.end():]
            return response.status, body, events


def accumulate(chunks: list[Json | str]) -> Json:
    """What an OpenAI client builds from a stream of chunks."""
    result: Json = {"content": "", "reasoning": "", "tool_calls": {}, "finish_reason": None, "usage": None,
                    "done": chunks[-1] == "[DONE]", "error": None}
    for chunk in chunks:
        if chunk == "[DONE]":
            continue
        assert isinstance(chunk, dict)
        result["error"] = chunk.get("error", result["error"])
        result["usage"] = chunk.get("usage") or result["usage"]
        for choice in chunk.get("choices", []):
            delta = choice["delta"]
            result["content"] += delta.get("content") or ""
            result["reasoning"] += delta.get("reasoning_content") or ""
            result["finish_reason"] = choice["finish_reason"] or result["finish_reason"]
            for call in delta.get("tool_calls", []):
                into = result["tool_calls"].setdefault(call["index"], {"id": None, "name": None, "arguments": ""})
                into["id"] = call.get("id") or into["id"]
                into["name"] = call.get("function", {}).get("name") or into["name"]
                into["arguments"] += call.get("function", {}).get("arguments", "")
    return result


async def stream_through(server: AnthropicTestServer, body: Json, include_usage: bool = True) -> Json:
    gateway = adapter(url=server.url)
    status, raw, events = await send(gateway.chat(body, "claude-test-1", stream=True))
    assert status == 200, raw
    translator = gateway.stream_translator(include_usage)
    return accumulate(decoded([c for e in events for c in translator.feed(e)] + translator.finish()))


@pytest.mark.parametrize("line_ending", ["\n", "\r\n"])
async def test_streamed_text_through_the_upstream(line_ending: str) -> None:
    async with run_anthropic_server(line_ending=line_ending) as server:
        server.cache_read_input_tokens = 5
        result = await stream_through(server, {
            "model": "fast", "stream": True, "stream_options": {"include_usage": True}, "n": 1,
            "messages": [{"role": "system", "content": "Be brief."}, user("hello there friend")]})
    assert server.last.body["system"] == "Be brief."
    assert server.last.headers["x-api-key"] == "test-key"
    assert result["content"] == "You said: hello there friend"
    assert result["finish_reason"] == "stop" and result["done"] and result["error"] is None
    assert result["usage"] == {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35,
                               "prompt_tokens_details": {"cached_tokens": 5, "cache_write_tokens": 0}}


async def test_streamed_tool_call_and_its_result_through_the_upstream(server: AnthropicTestServer) -> None:
    body: Json = {"messages": [user("Weather in Lagos?")], "tools": [WEATHER_TOOL], "parallel_tool_calls": False}
    result = await stream_through(server, body)
    assert server.last.body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert result["content"] == "Calling get_weather."
    assert result["finish_reason"] == "tool_calls"
    [call] = result["tool_calls"].values()
    assert call["name"] == "get_weather" and orjson.loads(call["arguments"]) == {"city": "test"}

    # the client runs the tool and sends the whole conversation back; the upstream checks the ids match
    body["messages"] += [
        {"role": "assistant", "content": result["content"], "tool_calls": [{
            "id": call["id"], "type": "function",
            "function": {"name": call["name"], "arguments": call["arguments"]}}]},
        {"role": "tool", "tool_call_id": call["id"], "content": "31C and sunny"}]
    follow_up = await stream_through(server, body)
    assert follow_up["content"] == "You said: 31C and sunny" and follow_up["finish_reason"] == "stop"


async def test_streamed_thinking_through_the_upstream(server: AnthropicTestServer) -> None:
    result = await stream_through(server, {"messages": [user("why?")], "reasoning_effort": "medium"})
    assert server.last.body["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert result["reasoning"] == "Thinking it over." and result["content"] == "You said: why?"


async def test_stop_and_length_through_the_upstream(server: AnthropicTestServer) -> None:
    stopped = await stream_through(server, {"messages": [user("one two three")], "stop": ["two"]})
    assert stopped["content"] == "You said: one " and stopped["finish_reason"] == "stop"
    cut = await stream_through(server, {"messages": [user("one two three")], "max_tokens": 2})
    assert cut["content"] == "You said: " and cut["finish_reason"] == "length"


@pytest.mark.parametrize("fault", ["error", "cut"])
async def test_stream_faults_through_the_upstream(server: AnthropicTestServer, fault: str) -> None:
    server.fault = fault  # type: ignore[assignment]
    result = await stream_through(server, {"messages": [user("hello")]})
    assert result["done"] and result["error"] is not None and result["finish_reason"] is None
    assert result["error"]["type"] == ("overloaded_error" if fault == "error" else "upstream_error")


async def test_non_streamed_answer_through_the_upstream(server: AnthropicTestServer) -> None:
    gateway = adapter(url=server.url)
    body = {"messages": [user([{"type": "text", "text": "look"},
                               {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}}])],
            "tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    status, raw, _ = await send(gateway.chat(body, "claude-test-1", stream=False))
    assert status == 200, raw
    out = orjson.loads(gateway.chat_response(raw))
    assert server.last.body["messages"][0]["content"][1]["source"]["media_type"] == "image/jpeg"
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert out["choices"][0]["message"]["content"] == "Calling get_weather."
    assert orjson.loads(out["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]) == {"city": "test"}
    assert out["usage"]["prompt_tokens"] == 25 and out["usage"]["completion_tokens"] > 0


async def test_the_upstream_rejects_what_anthropic_rejects(server: AnthropicTestServer) -> None:
    gateway = adapter(url=server.url)
    good = gateway.chat({"messages": [user("hi")]}, "claude-test-1", stream=False)
    extra = UpstreamRequest(good.url, good.headers, orjson.dumps({**orjson.loads(good.data), "n": 2}))
    status, raw, _ = await send(extra)
    error = gateway.error(status, raw)
    assert (error.status, error.type) == (400, "invalid_request_error")
    assert error.message == "n: Extra inputs are not permitted"
    status, raw, _ = await send(UpstreamRequest(good.url, {**good.headers, "x-api-key": "wrong"}, good.data))
    assert status == 401


async def test_probe_against_the_upstream(server: AnthropicTestServer) -> None:
    url, headers = adapter(url=server.url).probe()
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        assert response.status == 200
        assert [m["id"] for m in (await response.json())["data"]] == ["claude-test-1", "claude-test-2"]


# --- the test upstream, as the real SDK sees it ------------------------------------------------

def sdk(server: AnthropicTestServer) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key="test-key", base_url=server.base_url, max_retries=0)


async def test_sdk_streams_text_from_the_upstream(server: AnthropicTestServer) -> None:
    async with sdk(server) as client, client.messages.stream(
            model="claude-test-1", max_tokens=2000, messages=[{"role": "user", "content": "hi there"}],
            thinking={"type": "enabled", "budget_tokens": 1024}) as stream:
        text = "".join([piece async for piece in stream.text_stream])
        final = await stream.get_final_message()
    assert text == "You said: hi there"
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == "Thinking it over." and final.content[0].signature == "sig-test"
    assert final.stop_reason == "end_turn" and final.usage.input_tokens == 25 and final.usage.output_tokens == 7


async def test_sdk_parses_tool_use_from_the_upstream(server: AnthropicTestServer) -> None:
    tools: Any = [{"name": "get_weather", "input_schema": WEATHER_TOOL["function"]["parameters"]}]
    question: Any = [{"role": "user", "content": "Weather?"}]
    async with sdk(server) as client:
        created = await client.messages.create(model="claude-test-1", max_tokens=100, tools=tools,
                                               messages=question)
        async with client.messages.stream(model="claude-test-1", max_tokens=100, tools=tools,
                                          messages=question) as stream:
            streamed = await stream.get_final_message()
    for reply in (created, streamed):
        assert reply.stop_reason == "tool_use"
        text, tool = reply.content
        assert text.type == "text" and tool.type == "tool_use"
        assert tool.name == "get_weather" and tool.input == {"city": "test"}
