"""Reasoning models in the simulated region: thinking before the answer when asked (or by default, on chat
completions), its tokens counted in the usage, streamed first (`reasoning_content`, Messages' thinking
blocks with their signature), and its time spent before the answer's first token."""

from __future__ import annotations

import anthropic
import openai
import pytest

from firsttoken.sim import lengths
from support.sim_region import region_on_loopback

THINKER, PLAIN = "qwen3-8b", "llama-3.2-1b"
QUESTION = [{"role": "user", "content": "Why is the first token slow from Lagos?"}]


@pytest.fixture(scope="module")
def port():
    # fp8 on an H200: about 2.5 ms a token, so a few hundred tokens of thinking take a second or two
    with region_on_loopback(models=[THINKER, PLAIN], gpu="h200", precision="fp8") as (port, _region):
        yield port


@pytest.fixture(scope="module")
def client(port):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)


def timing(headers) -> dict[str, float]:
    return {name.strip(): float(value) for name, value in
            (part.split(";dur=") for part in headers["server-timing"].split(","))}


def test_a_reasoning_model_thinks_first_and_counts_it(client) -> None:
    raw = client.chat.completions.with_raw_response.create(model=THINKER, max_tokens=8000, messages=QUESTION,
                                                           reasoning_effort="low")
    answer = raw.parse()
    message, usage = answer.choices[0].message, answer.usage
    reasoning = usage.completion_tokens_details.reasoning_tokens
    assert reasoning > 0 and message.reasoning_content and message.content
    assert usage.completion_tokens == reasoning + len(message.content.split(" "))
    ground = timing(raw.headers)
    # the thinking's tokens were decoded before the answer's first: its time, token by token
    assert ground["reasoning"] > ground["prefill"] and ground["reasoning"] / reasoning > 1.0
    reasoning_text, content = "", ""
    for chunk in client.chat.completions.create(model=THINKER, max_tokens=8000, messages=QUESTION,
                                                reasoning_effort="low", stream=True):
        delta = chunk.choices[0].delta
        if getattr(delta, "reasoning_content", None):
            assert not content  # all the thinking comes before the answer
            reasoning_text += delta.reasoning_content
        content += delta.content or ""
    assert (reasoning_text, content) == (message.reasoning_content, message.content)


def test_effort_and_max_tokens(client) -> None:
    none = client.chat.completions.create(model=THINKER, max_tokens=300, messages=QUESTION, reasoning_effort="none")
    assert none.usage.completion_tokens_details.reasoning_tokens == 0
    cut = client.chat.completions.create(model=THINKER, max_tokens=20, messages=QUESTION, reasoning_effort="low")
    assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == 20
    with pytest.raises(openai.BadRequestError) as plain:
        client.chat.completions.create(model=PLAIN, max_tokens=20, messages=QUESTION, reasoning_effort="high")
    assert plain.value.body["param"] == "reasoning_effort"
    with pytest.raises(openai.BadRequestError) as unknown:
        client.chat.completions.create(model=THINKER, max_tokens=20, messages=QUESTION, reasoning_effort="max")
    assert unknown.value.body["param"] == "reasoning_effort"


def test_extended_thinking_in_messages(port) -> None:
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="k", max_retries=0)
    thinking = {"type": "enabled", "budget_tokens": 1024}
    whole = client.messages.create(model=THINKER, max_tokens=4000, thinking=thinking, messages=QUESTION)
    assert [b.type for b in whole.content] == ["thinking", "text"] and whole.stop_reason == "end_turn"
    assert whole.content[0].signature and whole.content[0].thinking
    with client.messages.stream(model=THINKER, max_tokens=4000, thinking=thinking, messages=QUESTION) as stream:
        streamed = stream.get_final_message()
    assert [(b.type, getattr(b, "thinking", None), getattr(b, "text", None)) for b in streamed.content] == \
        [(b.type, getattr(b, "thinking", None), getattr(b, "text", None)) for b in whole.content]
    assert streamed.content[0].signature == whole.content[0].signature
    assert streamed.usage.output_tokens == whole.usage.output_tokens > len(whole.content[1].text.split(" "))
    plain = client.messages.create(model=THINKER, max_tokens=100, messages=QUESTION)
    assert [b.type for b in plain.content] == ["text"]  # Messages thinks only when asked
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=THINKER, max_tokens=2000, messages=QUESTION,
                               thinking={"type": "enabled", "budget_tokens": 100})
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=PLAIN, max_tokens=2000, messages=QUESTION, thinking=thinking)


def test_reasoning_lengths_by_effort() -> None:
    for effort, median in lengths.REASONING_MEDIAN.items():
        drawn = sorted(lengths.reasoning_length(effort, (i + 0.5) / 1000) for i in range(1000))
        assert drawn[500] == pytest.approx(median, rel=0.02)
        assert drawn[840] == pytest.approx(median * 2.2, rel=0.05)  # σ 0.8: one standard deviation up
