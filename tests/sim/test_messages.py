"""The region's Anthropic Messages API through the real anthropic SDK."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from firsttoken.sim import text
from support.sim_region import region_on_loopback

MESSAGES = [{"role": "user", "content": [{"type": "text", "text": "Where did the time go?"}]}]


@pytest.fixture(scope="module")
def client():
    with region_on_loopback(models=["llama-3.2-1b"]) as (port, _region):
        yield anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="k", max_retries=0)


def test_message_text_stop_reason_and_usage(client) -> None:
    system = "Answer briefly."
    raw = client.messages.with_raw_response.create(model="llama-3.2-1b", max_tokens=9, system=system,
                                                   messages=MESSAGES)
    message = raw.parse()
    assert message.content[0].text == "".join(text.answer(9, []).pieces)
    assert message.stop_reason == "max_tokens" and message.stop_sequence is None
    assert message.usage.output_tokens == 9
    assert message.usage.input_tokens == text.prompt_tokens(MESSAGES) + 4 + text.count_tokens(system)
    assert {"queue", "cold", "prefill"} <= {p.split(";")[0].strip() for p in raw.headers["server-timing"].split(",")}


def test_stop_sequence_is_named(client) -> None:
    message = client.messages.create(model="llama-3.2-1b", max_tokens=50, messages=MESSAGES,
                                     stop_sequences=["ocean", "cable"])
    assert message.content[0].text == "The request left Lagos on a submarine "
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "cable"


def test_stream_events_and_ground_truth(client) -> None:
    with client.messages.stream(model="llama-3.2-1b", max_tokens=12, messages=MESSAGES) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == "".join(text.answer(12, []).pieces) and len(pieces) == 12
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 12
    with client.messages.with_streaming_response.create(model="llama-3.2-1b", max_tokens=3, messages=MESSAGES,
                                                        stream=True) as response:
        body = response.read().decode()
    events = [line.split(": ", 1)[1] for line in body.splitlines() if line.startswith("event: ")]
    assert events == ["message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta",
                      "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    assert ": sim-timing decode;dur=" in body.split("event: message_stop")[0]


def test_errors_in_anthropic_format(client) -> None:
    url = f"{str(client.base_url).rstrip('/')}/v1/messages"
    missing = httpx.post(url, json={"model": "llama-3.2-1b", "messages": MESSAGES})
    assert missing.status_code == 400
    assert missing.json() == {"type": "error", "error": {"type": "invalid_request_error",
                                                         "message": "max_tokens: Field required."}}
    with pytest.raises(anthropic.NotFoundError) as unknown:
        client.messages.create(model="claude-9", max_tokens=5, messages=MESSAGES)
    assert "llama-3.2-1b" in unknown.value.body["error"]["message"]


def test_the_gateway_speaks_anthropic_to_the_region(tmp_path) -> None:
    """OpenAI in at the gateway, Anthropic's format to the region, OpenAI back: the real translation."""
    import openai

    from support.gateway_process import GatewayProcess

    with region_on_loopback(models=["llama-3.2-1b"]) as (port, _region):
        settings = {"upstreams": {"claude-like": {"url": f"http://127.0.0.1:{port}/v1", "api": "anthropic",
                                                  "key": "sk-ant-test"}}}
        with GatewayProcess(settings, tmp_path) as gateway:
            client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="none", max_retries=0)
            chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where did it go?"}]
            completion = client.chat.completions.create(model="claude-like/llama-3.2-1b", messages=chat,
                                                        max_tokens=7, stop=["Lagos"])
            assert completion.choices[0].message.content == "The request left "
            assert completion.choices[0].finish_reason == "stop"
            streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
                model="claude-like/llama-3.2-1b", messages=chat, max_tokens=7, stream=True) if c.choices)
            assert streamed == "".join(text.answer(7, []).pieces)


def test_count_tokens(client) -> None:
    system = "Answer briefly."
    counted = client.messages.count_tokens(model="llama-3.2-1b", system=system, messages=MESSAGES)
    answered = client.messages.create(model="llama-3.2-1b", max_tokens=2, system=system, messages=MESSAGES)
    assert counted.input_tokens == answered.usage.input_tokens == \
        text.prompt_tokens(MESSAGES) + 4 + text.count_tokens(system)
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="claude-nope", messages=MESSAGES)
