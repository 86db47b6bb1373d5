"""Answers that end on their own: a length drawn for the kind of request from production traces, capped by
max_tokens, the same for the same request (streamed or not), through the real openai and anthropic SDKs."""

from __future__ import annotations

import random
import statistics

import anthropic
import httpx
import openai
import pytest

from firsttoken.sim import lengths
from firsttoken.sim.lengths import Kind
from support.sim_region import region_on_loopback

MODEL = "llama-3.2-1b"


def chat(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


@pytest.fixture(scope="module")
def port():
    with region_on_loopback(models=[MODEL]) as (port, _region):
        yield port


@pytest.fixture(scope="module")
def client(port):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)


def steps(port: int) -> int:
    """The engine steps the region's replica has run (it records each one's lateness)."""
    return httpx.get(f"http://127.0.0.1:{port}/sim/stats").json()["replicas"][MODEL][0]["step_lateness"]["events"]


def test_an_answer_ends_on_its_own_under_a_large_max_tokens(client, port) -> None:
    before = steps(port)
    answer = client.chat.completions.create(model=MODEL, max_tokens=32_000,
                                            messages=chat("Why is my API slow from Lagos?"))
    choice = answer.choices[0]
    assert choice.finish_reason == "stop"
    assert 1 <= answer.usage.completion_tokens < 1001  # the trace's longest conversation answer is 1000
    assert choice.message.content.endswith(".")
    # and the engine stopped there: a step per token (the first with the prefill), not the 32 000 steps
    # max_tokens allows
    assert steps(port) - before == answer.usage.completion_tokens


def test_the_same_request_gets_the_same_answer_streamed_or_not(client) -> None:
    messages = chat("Explain prefill and decode in two paragraphs.")
    whole = client.chat.completions.create(model=MODEL, max_tokens=4096, messages=messages)
    again = client.chat.completions.create(model=MODEL, max_tokens=2048, messages=messages)
    stream = client.chat.completions.create(model=MODEL, max_tokens=4096, messages=messages, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert whole.choices[0].message.content == again.choices[0].message.content == streamed
    assert finish == ["stop"] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_max_tokens_still_cuts_a_long_answer(client) -> None:
    messages = chat("Tell me everything about submarine cables.")
    natural = client.chat.completions.create(model=MODEL, max_tokens=4096, messages=messages)
    length = natural.usage.completion_tokens
    assert length > 2
    cut = client.chat.completions.create(model=MODEL, max_tokens=length - 1, messages=messages)
    assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == length - 1
    exact = client.chat.completions.create(model=MODEL, max_tokens=length, messages=messages)
    assert exact.choices[0].finish_reason == "stop" and exact.usage.completion_tokens == length


def test_ignore_eos_runs_to_max_tokens(client) -> None:
    answer = client.chat.completions.create(model=MODEL, max_tokens=40, messages=chat("Hi"),
                                            extra_body={"ignore_eos": True})
    assert answer.choices[0].finish_reason == "length" and answer.usage.completion_tokens == 40


def test_a_classification_answers_with_a_label(client) -> None:
    answers = [client.chat.completions.create(
        model=MODEL, max_tokens=1000,
        messages=[{"role": "system", "content": "Classify the sentiment: positive, negative or neutral."},
                  {"role": "user", "content": f"Review {i}: the latency from Nairobi was fine."}])
        for i in range(5)]
    assert all(a.choices[0].finish_reason == "stop" and a.usage.completion_tokens <= 3 for a in answers)


def test_anthropic_stop_reasons(port) -> None:
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="k", max_retries=0)
    messages = chat("What does a gateway near the user do?")
    ended = client.messages.create(model=MODEL, max_tokens=8192, messages=messages)  # the SDK streams past ~21 k
    assert ended.stop_reason == "end_turn" and ended.stop_sequence is None
    with client.messages.stream(model=MODEL, max_tokens=32_000, messages=messages) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == ended.content[0].text and final.stop_reason == "end_turn"
    assert final.usage.output_tokens == ended.usage.output_tokens
    cut = client.messages.create(model=MODEL, max_tokens=ended.usage.output_tokens - 1, messages=messages)
    assert cut.stop_reason == "max_tokens"


def test_the_region_can_run_every_answer_to_max_tokens() -> None:
    with region_on_loopback(models=[MODEL], answers="max_tokens") as (port, _region):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
        answer = client.chat.completions.create(model=MODEL, max_tokens=25, messages=chat("Hi"))
    assert answer.choices[0].finish_reason == "length" and answer.usage.completion_tokens == 25


def test_another_seed_draws_other_lengths() -> None:
    contents = [{"messages": chat(f"question {i}")} for i in range(50)]
    first = [lengths.natural_length(Kind.CHAT, lengths.fraction_for(0, c)) for c in contents]
    second = [lengths.natural_length(Kind.CHAT, lengths.fraction_for(1, c)) for c in contents]
    assert first == [lengths.natural_length(Kind.CHAT, lengths.fraction_for(0, c)) for c in contents]
    assert sum(a != b for a, b in zip(first, second, strict=True)) > 40


@pytest.mark.parametrize(("kind", "median", "p90", "mean"), [
    (Kind.CHAT, 129, 424, 211.1),  # the conversation trace's own figures: 19 365 answers
    (Kind.CODE_COMPLETION, 13, 55, 27.9),  # the coding trace's: 8 818
])
def test_drawn_lengths_follow_the_trace(kind: Kind, median: int, p90: int, mean: float) -> None:
    rng = random.Random(7)
    drawn = sorted(lengths.natural_length(kind, lengths.fraction_for(0, {"q": rng.random()})) for _ in range(20_000))
    assert abs(statistics.median(drawn) - median) <= 0.05 * median + 1
    assert abs(drawn[int(0.9 * len(drawn))] - p90) <= 0.05 * p90 + 1
    assert abs(statistics.mean(drawn) - mean) <= 0.1 * mean


def test_the_kind_of_request() -> None:
    assert lengths.kind_of("Classify this ticket as billing or technical") is Kind.CLASSIFICATION
    assert lengths.kind_of("Answer yes or no: is Lagos in Nigeria?") is Kind.CLASSIFICATION
    assert lengths.kind_of("<fim_prefix>def add(a, b):<fim_suffix><fim_middle>") is Kind.CODE_COMPLETION
    assert lengths.kind_of("Write a Python function that reverses a list") is Kind.CHAT


@pytest.mark.parametrize("kind", list(Kind))
def test_lengths_drawn_many_at_once_are_the_ones_drawn_one_at_a_time(kind: Kind) -> None:
    import numpy as np

    fractions = np.random.default_rng(4).random(20_000)
    assert lengths.natural_lengths(kind, fractions).tolist() == [lengths.natural_length(kind, f) for f in fractions]
