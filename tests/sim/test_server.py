"""The simulated region through the real openai SDK: answers, streams, usage and its ground truth."""

from __future__ import annotations

import time

import openai
import pytest

from firsttoken.sim import text
from firsttoken.sim.catalogue import Catalogue
from firsttoken.sim.roofline import Deployment
from support.sim_region import region_on_loopback
from support.waiting import not_before, wait_until, within

CATALOGUE = Catalogue.builtin()
DEPLOYMENT = Deployment(CATALOGUE.gpu("h100"), CATALOGUE.model("llama-3.1-8b"), "bf16", 1)


def openai_client(port: int, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0)


def server_timing(header: str) -> dict[str, float]:
    return {k.strip(): float(v) for k, v in (part.split(";dur=") for part in header.split(","))}


@pytest.fixture(scope="module")
def client():
    with region_on_loopback() as (port, _region):
        yield openai_client(port)


MESSAGES = [{"role": "user", "content": "How long does a token take from Virginia to Lagos?"}]


def test_non_streaming_answer_usage_and_ground_truth(client) -> None:
    raw = client.chat.completions.with_raw_response.create(model="llama-3.1-8b", messages=MESSAGES, max_tokens=12)
    completion = raw.parse()
    pieces = text.answer(12, []).pieces
    assert completion.choices[0].message.content == "".join(pieces)
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 12
    assert completion.usage.prompt_tokens == text.prompt_tokens(MESSAGES)
    timing = dict(part.strip().split(";dur=") for part in raw.headers["server-timing"].split(","))
    assert set(timing) == {"queue", "cold", "prefill"}
    # an idle region: no queue (the engine loop's wake-up only, however late a busy machine ran it), and
    # the first token after one prefill step of this prompt
    assert 0 <= float(timing["queue"]) < within(0) * 1000
    expected = DEPLOYMENT.mixed_step_s(0, 0, text.prompt_tokens(MESSAGES), 0) * 1000
    assert float(timing["prefill"]) == pytest.approx(expected, abs=0.05)


def test_stream_follows_the_engine_schedule(client) -> None:
    started = time.perf_counter()
    stream = client.chat.completions.create(model="llama-3.1-8b", messages=MESSAGES, max_tokens=40, stream=True,
                                            stream_options={"include_usage": True})
    arrivals, content, usage = [], "", None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.perf_counter())
            content += chunk.choices[0].delta.content
        if chunk.usage:
            usage = chunk.usage
    assert content == "".join(text.answer(40, []).pieces) and usage.completion_tokens == 40
    decode = DEPLOYMENT.decode_step_s(text.prompt_tokens(MESSAGES) + 20, 1)
    # 39 decode steps after the first token: no token comes before its step has ended (this client shares a
    # process with the region, so a read is only ever late), and the schedule is absolute: a busy machine
    # delays tokens, it does not stretch the answer by a step's worth each
    assert not_before(arrivals[-1] - arrivals[0], 0.9 * 39 * decode)
    assert arrivals[-1] - arrivals[0] < within(39 * decode) and arrivals[-1] - started < within(40 * decode)


def test_stop_sequences_and_unknown_models(client) -> None:
    completion = client.chat.completions.create(model="llama-3.1-8b", messages=MESSAGES, max_tokens=50, stop=["cable"])
    assert completion.choices[0].message.content == "The request left Lagos on a submarine "
    assert completion.choices[0].finish_reason == "stop"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-9", messages=MESSAGES)
    assert [m.id for m in client.models.list()] == ["llama-3.1-8b"]


def test_a_quiet_spell_costs_a_cold_start() -> None:
    # llama-3.2-1b's 2.47 GB at 24.7 GB/s is 0.1 s, plus a 0.2 s engine start
    with region_on_loopback(models=["llama-3.2-1b"], idle_unload=0.2, load_gb_s=24.7, engine_start_s=0.2) as (
            port, region):
        client = openai_client(port)
        load_ms = region.settings.load_s(region.settings.deployments["llama-3.2-1b"]) * 1000
        assert load_ms == pytest.approx(300, abs=1)

        def ask() -> tuple[dict[str, float], float]:
            started = time.perf_counter()
            raw = client.chat.completions.with_raw_response.create(model="llama-3.2-1b", messages=MESSAGES,
                                                                    max_tokens=2)
            return server_timing(raw.headers["server-timing"]), time.perf_counter() - started

        warm, _ = ask()
        assert warm["cold"] == 0
        replica = region.replicas["llama-3.2-1b"][0]
        wait_until(lambda: not replica.loaded, "the model to leave GPU memory after idle_unload")
        cold, elapsed = ask()
        assert cold["cold"] == pytest.approx(load_ms, abs=20) and not_before(elapsed, 0.3)
        again, _ = ask()  # loaded again
        assert again["cold"] == 0
