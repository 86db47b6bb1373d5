"""An openai-SDK app, unchanged, talking through the gateway to an upstream that speaks Anthropic's
Messages API (a real server emitting the real streaming event sequence)."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from conftest import CLIENT_KEY
from support.anthropic_server import run_anthropic_server
from support.gateway_process import GatewayProcess
from support.threaded import InThread

ANTHROPIC_KEY = "sk-ant-test-key-not-for-logs"


@pytest.fixture(scope="module")
def anthropic_upstream():
    with InThread(lambda: run_anthropic_server(api_key=ANTHROPIC_KEY)) as server:
        yield server


@pytest.fixture(scope="module")
def client(anthropic_upstream, tmp_path_factory):
    # every request must cross to the upstream: the edge cache (on by default) has its own tests
    settings = {"cache": False,
                "upstreams": {"claude": {"url": anthropic_upstream.url, "api": "anthropic", "key": ANTHROPIC_KEY}},
                "models": {"chat": ["claude/claude-test"]},
                "keys": [{"name": "app", "key": CLIENT_KEY}]}
    with GatewayProcess(settings, tmp_path_factory.mktemp("anthropic")) as gateway:
        yield openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
        assert ANTHROPIC_KEY not in gateway.log()


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello Lagos"}]


def test_non_streaming(client, anthropic_upstream) -> None:
    completion = client.chat.completions.create(model="chat", messages=MESSAGES, max_tokens=50)
    assert completion.choices[0].message.content == "You said: hello Lagos"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.prompt_tokens == 25 and completion.usage.completion_tokens > 0
    sent = anthropic_upstream.last.body
    assert sent["system"] == "Be brief." and sent["max_tokens"] == 50 and sent["model"] == "claude-test"


def test_streaming_with_and_without_usage(client) -> None:
    chunks = list(client.chat.completions.create(model="chat", messages=MESSAGES, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "You said: hello Lagos"
    assert all(c.choices for c in chunks)  # no usage chunk: not asked for
    assert chunks[-1].choices[0].finish_reason == "stop"
    asked = list(client.chat.completions.create(model="chat", messages=MESSAGES, stream=True,
                                                stream_options={"include_usage": True}))
    assert asked[-1].usage.prompt_tokens == 25 and not asked[-1].choices


def test_max_tokens_is_length(client) -> None:
    completion = client.chat.completions.create(model="chat", messages=MESSAGES, max_tokens=1)
    assert completion.choices[0].finish_reason == "length"


TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def test_tool_calls_streaming_and_round_trip(client, anthropic_upstream) -> None:
    name, arguments, call_id, finish = None, "", None, None
    for chunk in client.chat.completions.create(model="chat", messages=MESSAGES, tools=TOOLS, stream=True):
        if not chunk.choices:
            continue
        finish = chunk.choices[0].finish_reason or finish
        for call in chunk.choices[0].delta.tool_calls or []:
            name = call.function.name or name
            call_id = call.id or call_id
            arguments += call.function.arguments or ""
    assert name == "weather" and json.loads(arguments) == {"city": "test"} and finish == "tool_calls"
    follow_up = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "weather", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "sunny"}]
    completion = client.chat.completions.create(model="chat", messages=follow_up, tools=TOOLS)
    assert completion.choices[0].message.content == "You said: sunny"
    blocks = anthropic_upstream.last.body["messages"][-1]["content"]
    assert blocks[0]["type"] == "tool_result" and blocks[0]["tool_use_id"] == call_id


def test_error_event_mid_stream(client, anthropic_upstream) -> None:
    anthropic_upstream.fault = "error"
    try:
        with pytest.raises(openai.APIError):
            for _ in client.chat.completions.create(model="chat", messages=MESSAGES, stream=True):
                pass
    finally:
        anthropic_upstream.fault = None


def test_upstream_error_passes_through(client) -> None:
    with pytest.raises(openai.BadRequestError):  # the test server rejects an empty text block, as Anthropic does
        client.chat.completions.create(model="chat",
                                       messages=[{"role": "user", "content": [{"type": "text", "text": ""}]}])


# --- Messages in: the client's own request passes through -------------------------------------------

@pytest.fixture(scope="module")
def messages_client(client, anthropic_upstream):
    return anthropic.Anthropic(base_url=str(client.base_url).removesuffix("/v1/"), api_key=CLIENT_KEY, max_retries=0)


def test_messages_pass_through_with_cache_control_thinking_and_betas(messages_client, anthropic_upstream) -> None:
    system = [{"type": "text", "text": "A long, stable preamble.", "cache_control": {"type": "ephemeral"}}]
    history = [{"role": "user", "content": "first"},
               {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "sig-1"},
                                                 {"type": "text", "text": "ok"}]},
               {"role": "user", "content": [{"type": "text", "text": "hello Lagos",
                                             "cache_control": {"type": "ephemeral"}}]}]
    with messages_client.messages.stream(
            model="chat", max_tokens=2048, system=system, messages=history,
            thinking={"type": "enabled", "budget_tokens": 1024},
            extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"}) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    sent = anthropic_upstream.last
    assert sent.body["system"] == system and sent.body["messages"] == history  # untouched
    assert sent.body["model"] == "claude-test" and sent.body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert sent.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert sent.headers["x-api-key"] == ANTHROPIC_KEY  # the gateway's key, not the client's
    # The upstream's own events, signature and ping included, reached the SDK as they were sent.
    thinking = next(block for block in final.content if block.type == "thinking")
    assert thinking.signature and "signature" in kinds and final.content[-1].text == "You said: hello Lagos"
    assert final.usage.input_tokens == 25


def test_messages_whole_answer_passes_through(messages_client, anthropic_upstream) -> None:
    message = messages_client.messages.create(model="chat", max_tokens=50, messages=[
        {"role": "user", "content": "hello whole"}])
    assert message.content[0].text == "You said: hello whole" and message.id.startswith("msg_")
    assert message.usage.cache_creation_input_tokens is not None  # the upstream's usage, as it was


def test_messages_error_event_mid_stream(messages_client, anthropic_upstream) -> None:
    anthropic_upstream.fault = "error"
    try:
        with pytest.raises(anthropic.APIStatusError) as failed:
            with messages_client.messages.stream(model="chat", max_tokens=50, messages=[
                    {"role": "user", "content": "hello fault"}]) as stream:
                for _ in stream:
                    pass
        assert "Overloaded" in str(failed.value)
    finally:
        anthropic_upstream.fault = None


def test_messages_chat_cannot_carry_still_pass_through(messages_client, anthropic_upstream) -> None:
    """A server tool's call and result in the history: no chat form holds them, an Anthropic upstream does."""
    history = [{"role": "user", "content": "Search for Lagos."},
               {"role": "assistant", "content": [
                   {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "Lagos"}},
                   {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                   {"type": "text", "text": "Found it."}]},
               {"role": "user", "content": "hello again"}]
    message = messages_client.messages.create(model="chat", max_tokens=50, messages=history)
    assert message.content[0].text == "You said: hello again"
    assert anthropic_upstream.last.body["messages"] == history
