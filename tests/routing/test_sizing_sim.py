"""Task sizing against real model sizes: one simulated region (a real `firsttoken sim` process) serves
Llama-3.2-1B and Llama-3.1-8B on H100s, the `auto` alias sizes each request by its task, and the
region's own ground truth shows what the small tier buys: a small model writes each token sooner."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from conftest import CLIENT_KEY
from firsttoken.sim.text import answer
from support.gateway_process import GatewayProcess
from support.sim_process import SimProcess

SMALL, LARGE = "llama-3.2-1b", "llama-3.1-8b"  # 1.7 ms and 8.2 ms a decode step on an H100 (the roofline)
EXTRACTION = "Extract the invoice number from: INV-2231, due 3 May."
REASONING = "Prove that the square root of 2 is irrational, step by step."
MAX_TOKENS = 48
# The streams whose pace the gateway compares: long enough that the small model's lead (about 1.7 against
# 8.2 ms a token: 0.2 s against 1 s in all) outlasts any stall a busy machine puts in the small one's way.
PACED_TOKENS = 128
SIM_DECODE = re.compile(r"^: sim-timing decode;dur=([0-9.]+)$")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    workdir: Path = tmp_path_factory.mktemp("sizing-sim")
    with SimProcess(workdir, "--gpu", "h100", "--model", SMALL, "--model", LARGE) as region:
        # every request must cross to the upstream: the edge cache (on by default) has its own tests
        settings = {"cache": False, "upstreams": {"region": {"url": region.url}},
                    "models": {"big": [f"region/{LARGE}"]},
                    "sizing": {"tiers": {"small": [f"region/{SMALL}"], "large": ["big"]}, "default": "large",
                               "kinds": {"extraction": "small", "classification": "small", "short": "small"},
                               "neighbours": False},
                    "keys": [{"name": "app", "key": CLIENT_KEY}]}
        with GatewayProcess(settings, workdir) as running:
            yield running


def client(gateway: GatewayProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("text", "size", "model"), [
    (EXTRACTION, "extraction; tier=small; by=rules", SMALL),
    (REASONING, "reasoning; tier=large; by=rules", LARGE),
], ids=["extraction", "reasoning"])
def test_auto_sends_each_task_to_the_model_of_its_size(gateway: GatewayProcess, text: str, size: str,
                                                      model: str, stream: bool) -> None:
    raw = client(gateway).chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": text}], max_tokens=MAX_TOKENS, stream=stream)
    assert raw.headers["x-firsttoken-size"] == size
    assert raw.headers["x-firsttoken-route"] == f"region/{model}"
    if stream:
        chunks = list(raw.parse())
        assert {c.model for c in chunks} == {model}
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        completion = raw.parse()
        assert completion.model == model
        content = completion.choices[0].message.content
    assert content == "".join(answer(MAX_TOKENS, []).pieces)


def test_opting_out_sends_a_small_task_to_the_default_tier(gateway: GatewayProcess) -> None:
    raw = client(gateway).chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": EXTRACTION}], max_tokens=4,
        extra_headers={"x-firsttoken-size": "off"})
    assert raw.headers["x-firsttoken-size"] == "off; tier=large"
    assert raw.parse().model == LARGE


def sized_stream(gateway: GatewayProcess, text: str) -> tuple[str, float, str]:
    """A stream through `auto`, read line by line: (the model that answered, the region's own decode time
    per token from its closing `: sim-timing decode;dur=` comment, which the gateway relays, the request id)."""
    with client(gateway).chat.completions.with_streaming_response.create(
            model="auto", messages=[{"role": "user", "content": text}], max_tokens=PACED_TOKENS, stream=True) as raw:
        lines = list(raw.iter_lines())
        request_id = raw.headers["x-request-id"]
    decode = [float(m.group(1)) for line in lines if (m := SIM_DECODE.match(line))]
    tokens = sum(1 for line in lines if line.startswith("data: {") and re.search(r'"content":"[^"]', line))
    assert len(decode) == 1 and tokens == PACED_TOKENS, lines[-6:]
    model = re.search(r'"model":"([^"]+)"', next(line for line in lines if line.startswith("data: {"))).group(1)
    return model, decode[0] / (tokens - 1), request_id


def test_the_small_model_writes_each_token_sooner(gateway: GatewayProcess) -> None:
    small_model, small_ms, small_id = sized_stream(gateway, EXTRACTION)
    large_model, large_ms, large_id = sized_stream(gateway, REASONING)
    assert (small_model, large_model) == (SMALL, LARGE)
    # Ground truth: the region's scheduled decode, not this machine's pace (one forward pass reads all the
    # weights: 2.5 GB against 16 GB at 3.35 TB/s, plus the step's fixed cost), about 1.7 against 8.2 ms a token.
    assert 1.0 < small_ms < 3.0 and 5.0 < large_ms < 12.0, (small_ms, large_ms)
    assert large_ms > 2.5 * small_ms
    # And as the gateway measured it on the way through (journey `tokens_per_s`): the small one is faster,
    # whatever this machine's scheduling did to either stream.
    journeys = httpx.get(gateway.url + "/v1/journeys?limit=50", headers={"authorization": f"Bearer {CLIENT_KEY}"},
                         timeout=5).json()["data"]
    by_id = {j["request_id"]: j for j in journeys}
    small, large = by_id[small_id], by_id[large_id]
    assert (small["route"], large["route"]) == (f"region/{SMALL}", f"region/{LARGE}")
    assert small["tokens_per_s"] > large["tokens_per_s"]
    # The region's Server-Timing rides along in the journey: the 8B's prefill of a prompt costs more too.
    assert large["upstream_timing"]["prefill"] > small["upstream_timing"]["prefill"], (small, large)
