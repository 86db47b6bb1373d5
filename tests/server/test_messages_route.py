"""POST /v1/messages: Anthropic's own SDK, unchanged, through the gateway to the simulated region, two ways:
translated for an OpenAI-compatible upstream (the region's chat completions), and passed through to an
upstream that speaks Messages itself (the same region's /v1/messages)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import pytest

from conftest import CLIENT_KEY
from support.gateway_process import GatewayProcess
from support.sim_process import SimProcess

TRANSLATED, NATIVE = "llama", "claude"
ROUTES = [TRANSLATED, NATIVE]
WEATHER = {"name": "weather", "description": "The weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    workdir: Path = tmp_path_factory.mktemp("messages")
    with SimProcess(workdir, "--model", "llama-3.1-8b", "--model", "qwen3-8b") as sim:
        settings = {"upstreams": {"sim": {"url": sim.url, "api": "openai"},
                                  "anthropic": {"url": sim.url, "api": "anthropic", "key": "sk-ant-placeholder"}},
                    "models": {TRANSLATED: ["sim/llama-3.1-8b"], NATIVE: ["anthropic/llama-3.1-8b"],
                               "thinker": ["sim/qwen3-8b"], "native-thinker": ["anthropic/qwen3-8b"]},
                    "cache": {"backend": "memory"},
                    "keys": [{"name": "app", "key": CLIENT_KEY}]}
        with GatewayProcess(settings, workdir) as gateway:
            yield gateway


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key=CLIENT_KEY, max_retries=0)


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize("model", ROUTES)
def test_create(client: anthropic.Anthropic, model: str) -> None:
    message = client.messages.create(model=model, max_tokens=40, system="Be brief.",
                                     messages=ask(f"create through {model}"))
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "text" and message.content[0].text
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens > 0 and 0 < message.usage.output_tokens <= 40


@pytest.mark.parametrize("model", ROUTES)
def test_stream(client: anthropic.Anthropic, model: str) -> None:
    with client.messages.stream(model=model, max_tokens=30, messages=ask(f"stream through {model}")) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].text == text
    assert final.stop_reason in ("end_turn", "max_tokens") and 0 < final.usage.output_tokens <= 30


@pytest.mark.parametrize("model", ROUTES)
def test_tool_use_and_its_result(client: anthropic.Anthropic, model: str) -> None:
    question = ask(f"What is the weather in Lagos? ({model})")
    with client.messages.stream(model=model, max_tokens=200, tools=[WEATHER],
                                tool_choice={"type": "tool", "name": "weather"}, messages=question) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    use = next(block for block in final.content if block.type == "tool_use")
    assert use.name == "weather" and isinstance(use.input.get("city"), str)
    answer = client.messages.create(model=model, max_tokens=40, tools=[WEATHER], messages=[
        *question, {"role": "assistant", "content": [block.model_dump() for block in final.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "31 °C, humid"}]}])
    assert answer.content[0].type == "text" and answer.stop_reason in ("end_turn", "max_tokens")


def test_errors_raise_the_sdks_own_classes(client: anthropic.Anthropic, gateway: GatewayProcess) -> None:
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model=TRANSLATED, max_tokens=0, messages=ask("hi"))
    assert bad.value.body["error"]["type"] == "invalid_request_error" and "max_tokens" in bad.value.message
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="no-such-model", max_tokens=10, messages=ask("hi"))
    stranger = anthropic.Anthropic(base_url=gateway.url, api_key="not-a-key", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as refused:
        stranger.messages.create(model=TRANSLATED, max_tokens=10, messages=ask("hi"))
    assert refused.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                             "message": refused.value.body["error"]["message"]}}


def events(gateway: GatewayProcess, body: dict, headers: dict | None = None) -> list[tuple[str, dict]]:
    """The stream's events, by name, as they came."""
    out = []
    with httpx.stream("POST", gateway.url + "/v1/messages", json={**body, "stream": True}, timeout=30,
                      headers={"x-api-key": CLIENT_KEY, **(headers or {})}) as response:
        assert response.status_code == 200
        name = None
        for line in response.iter_lines():
            if line.startswith("event:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                out.append((name, json.loads(line[5:])))
                name = None
    return out


@pytest.mark.parametrize("model", ["thinker", "native-thinker"])
def test_event_sequence_with_thinking(gateway: GatewayProcess, model: str) -> None:
    """The real order: message_start; each block's start, deltas, stop; message_delta; message_stop."""
    # The region draws how long it thinks from the request: this one, a few hundred tokens (seconds, not ten).
    seen = events(gateway, {"model": model, "max_tokens": 2000, "messages": ask("think, then say yes"),
                            "thinking": {"type": "enabled", "budget_tokens": 1024}})
    names = [name for name, _ in seen]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert all(name == data["type"] for name, data in seen)
    blocks = [data["content_block"]["type"] for name, data in seen if name == "content_block_start"]
    assert blocks[0] == "thinking" and "text" in blocks
    open_block = None
    for name, data in seen:
        if name == "content_block_start":
            assert open_block is None
            open_block = data["index"]
        elif name == "content_block_delta":
            assert data["index"] == open_block
        elif name == "content_block_stop":
            assert data["index"] == open_block
            open_block = None
    assert seen[-2][1]["delta"]["stop_reason"] in ("end_turn", "max_tokens")
    assert seen[-2][1]["usage"]["output_tokens"] > 0


def test_a_repeated_stream_is_replayed_from_the_cache_as_messages_events(gateway: GatewayProcess) -> None:
    body = {"model": TRANSLATED, "max_tokens": 20, "messages": ask("a question asked twice")}
    first = events(gateway, body)
    with httpx.stream("POST", gateway.url + "/v1/messages", json={**body, "stream": True},
                      headers={"x-api-key": CLIENT_KEY}) as response:
        assert response.headers["x-firsttoken-cache"].startswith("hit")
        response.read()
    again = events(gateway, body)
    text = ["".join(d["delta"].get("text", "") for n, d in run if n == "content_block_delta") for run in (first, again)]
    assert text[0] and text[0] == text[1]
    assert [n for n, _ in again][-2:] == ["message_delta", "message_stop"]


def test_count_tokens(client: anthropic.Anthropic) -> None:
    """Counted by an Anthropic upstream (here the region, counting as it would run it); estimated by the
    gateway for a model with none, and said to be."""
    asked = ask("How many tokens is this question? " * 20)
    counted = client.messages.with_raw_response.count_tokens(model=NATIVE, messages=asked, system="Be brief.")
    assert counted.parse().input_tokens > 100 and "x-firsttoken-count" not in counted.headers
    estimated = client.messages.with_raw_response.count_tokens(model=TRANSLATED, messages=asked, system="Be brief.")
    assert estimated.headers["x-firsttoken-count"] == "estimated"
    assert abs(estimated.parse().input_tokens - counted.parse().input_tokens) < counted.parse().input_tokens / 2
    with pytest.raises(anthropic.BadRequestError):
        client.messages.count_tokens(model=NATIVE, messages=[])


def test_what_a_chat_upstream_cannot_take_is_refused_only_there(client: anthropic.Anthropic) -> None:
    history = [{"role": "user", "content": "Read this."},
               {"role": "user", "content": [{"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}},
                                            {"type": "text", "text": "What does it say?"}]}]
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model=TRANSLATED, max_tokens=20, messages=history)
    assert "source" in refused.value.message


def test_anthropics_sdk_lists_and_retrieves_models_in_its_shape(client: anthropic.Anthropic) -> None:
    listed = client.models.list()
    assert TRANSLATED in [model.id for model in listed.data] and listed.data[0].type == "model"
    assert client.models.retrieve(NATIVE).display_name == NATIVE
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.models.retrieve("no-such-model")
    assert missing.value.body["error"]["type"] == "not_found_error"
