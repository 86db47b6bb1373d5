"""`firsttoken serve` with nothing configured: a working, streaming gateway on an in-process simulated
region, which says plainly that it is one."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import httpx
import openai
import pytest

from firsttoken.sim import text
from support.gateway_process import GatewayProcess, free_port
from support.openai_upstream import UPSTREAM_KEY
from support.waiting import not_before, wait_until


@contextmanager
def serve_alone(workdir: Path) -> Iterator[tuple[str, TextIO]]:
    """`firsttoken serve` with no config file, no key in the environment, in `workdir`: (its URL, its output)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "FIRSTTOKEN_CONFIG"}
    env["COLUMNS"] = "200"  # a banner line each (80 columns: tests/test_banner.py)
    port = free_port()
    log = (workdir / "serve.log").open("a+")
    process = subprocess.Popen([sys.executable, "-m", "firsttoken", "serve", "--port", str(port)], cwd=workdir,
                               env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert process.poll() is None, f"serve exited ({process.returncode})"
            try:
                return httpx.get(url + "/readyz", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, "serve to be ready", timeout_s=60)  # it loads the embedding model: seconds on a busy day
        yield url, log
    finally:
        process.terminate()
        process.wait(10)


def test_serve_alone_streams_from_a_simulated_region(tmp_path: Path) -> None:
    with serve_alone(tmp_path) as (url, log):
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
        models = client.models.list().data
        assert [m.id for m in models] == ["llama-3.1-8b", "bge-small-en-v1.5", "sim/llama-3.1-8b",
                                          "sim/bge-small-en-v1.5"]  # the names to ask for, then where they go
        assert client.models.retrieve("llama-3.1-8b").targets == ["sim/llama-3.1-8b"]
        assert "simulated region in this process" in models[0].description
        assert "aws:us-east-1" in models[0].description and "Lagos" in models[0].description
        started, first, content = time.perf_counter(), None, ""
        for chunk in client.chat.completions.create(model="llama-3.1-8b", messages=[{"role": "user", "content": "hi"}],
                                                    max_tokens=8, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                first = first or time.perf_counter() - started
                content += chunk.choices[0].delta.content
        assert content == "".join(text.answer(8, []).pieces)
        assert not_before(first, 0.12)  # Lagos to Virginia and back, in fibre
        vectors = client.embeddings.create(model="bge-small-en-v1.5", input=["a cable", "an ocean"]).data
        assert [len(v.embedding) for v in vectors] == [384, 384]
        log.seek(0)
        banner = log.read()
        assert "a simulated region in this process" in banner and "OPENAI_API_KEY" in banner


def ask(url: str, question: str) -> tuple[str, str, dict[str, float]]:
    """(x-firsttoken-cache, the answer, its Server-Timing by phase)."""
    response = httpx.post(url + "/v1/chat/completions", timeout=30, json={
        "model": "llama-3.1-8b", "max_tokens": 8, "messages": [{"role": "user", "content": question}]})
    assert response.status_code == 200, response.text
    timing = {name.strip(): float(ms) for name, ms in (part.split(";dur=") for part in
                                                       response.headers["server-timing"].split(","))}
    return response.headers["x-firsttoken-cache"], response.json()["choices"][0]["message"]["content"], timing


def test_serve_alone_answers_repeats_and_paraphrases_from_the_edge_across_a_restart(tmp_path: Path) -> None:
    # A busy machine's encoder skips a lookup it would wait for: this one waits, so the paraphrase is looked up.
    (tmp_path / "firsttoken.yaml").write_text("cache: {semantic_wait_ms: 30000}\n")
    with serve_alone(tmp_path) as (url, log):
        outcome, answer, timing = ask(url, "How do I cook beans?")
        assert outcome == "miss" and timing["rtt"] > 120  # it went to Virginia
        outcome, again, timing = ask(url, "What is the way to cook beans?")
        assert outcome.startswith("semantic-hit; similarity=0.") and again == answer
        assert "rtt" not in timing and timing["ttfb"] == 0  # the edge answered: no round trip to Virginia
        assert ask(url, "How do I cook rice?")[0] == "miss"  # a different question is not served beans
        log.seek(0)
        assert f"exact and paraphrases, in {tmp_path / 'firsttoken-cache.db'}" in log.read()
    assert (tmp_path / "firsttoken-cache.db").is_file()  # where serve runs: it survives a restart
    with serve_alone(tmp_path) as (url, _):
        assert ask(url, "How do I cook beans?")[:2] == ("hit", answer)
        assert ask(url, "What's the way to cook beans?")[0].startswith("semantic-hit")


def test_cache_false_turns_the_edge_cache_off(tmp_path: Path) -> None:
    (tmp_path / "firsttoken.yaml").write_text("cache: false\n")
    with serve_alone(tmp_path) as (url, log):
        assert [ask(url, "How do I cook beans?")[0] for _ in range(2)] == ["bypass", "bypass"]
        log.seek(0)
        assert re.search(r"^  cache +off *$", log.read(), re.MULTILINE)
    assert not (tmp_path / "firsttoken-cache.db").exists()


def test_a_sim_section_runs_beside_real_upstreams(tmp_path: Path, upstream) -> None:
    settings = {"location": "nairobi",
                "upstreams": {"fake": {"url": upstream.url, "key": UPSTREAM_KEY}},
                "models": {"local": ["sim/qwen2.5-7b"]},
                "sim": {"models": ["qwen2.5-7b"], "gpu": "l4", "region": "gcp:europe-west1",
                        "client_location": "nairobi"}}
    with GatewayProcess(settings, tmp_path) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="none", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(model="local", messages=[{"role": "user",
                                                                                       "content": "hi"}], max_tokens=3)
        assert raw.headers["x-firsttoken-route"] == "sim/qwen2.5-7b"
        assert raw.parse().choices[0].message.content == "".join(text.answer(3, []).pieces)
        assert client.chat.completions.create(model="fake/echo", messages=[{"role": "user", "content": "x"}]).choices


@pytest.mark.parametrize("sim, words", [
    ({"gpu": "h1000"}, ["sim:", "h100"]),
    ({"region": "aws:mars-1"}, ["unknown region"]),
])
def test_sim_section_errors_stop_the_start(tmp_path: Path, sim: dict, words: list[str]) -> None:
    (tmp_path / "firsttoken.yaml").write_text(f"sim: {sim!r}\n".replace("'", '"'))
    result = subprocess.run([sys.executable, "-m", "firsttoken", "serve", "--config", "firsttoken.yaml"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    for word in words:
        assert word in result.stderr


def test_an_agent_loop_and_structured_output_through_the_gateway(tmp_path: Path) -> None:
    tool = {"type": "function", "function": {"name": "lookup_order", "description": "An order by its number",
                                             "parameters": {"type": "object", "required": ["number"],
                                                            "properties": {"number": {"type": "integer"}}}}}
    with GatewayProcess({"sim": {"models": ["llama-3.2-1b"]}}, tmp_path) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="none", max_retries=0)
        messages = [{"role": "user", "content": "Where is my order? lookup_order please"}]
        called = client.chat.completions.create(model="sim/llama-3.2-1b", messages=messages, tools=[tool],
                                                max_tokens=32_000)
        [call] = called.choices[0].message.tool_calls
        assert called.choices[0].finish_reason == "tool_calls" and call.function.name == "lookup_order"
        streamed = "".join(part.function.arguments or "" for chunk in client.chat.completions.create(
            model="sim/llama-3.2-1b", messages=messages, tools=[tool], max_tokens=32_000, stream=True)
            if chunk.choices for part in chunk.choices[0].delta.tool_calls or [])
        assert streamed == call.function.arguments
        messages += [called.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "shipped"}]
        answered = client.chat.completions.create(model="sim/llama-3.2-1b", messages=messages, tools=[tool],
                                                  max_tokens=32_000)
        assert answered.choices[0].finish_reason == "stop" and answered.choices[0].message.content
        schema = {"name": "verdict", "strict": True, "schema": {
            "type": "object", "required": ["late"], "additionalProperties": False,
            "properties": {"late": {"type": "boolean"}}}}
        structured = client.chat.completions.create(model="sim/llama-3.2-1b", max_tokens=32_000,
                                                    messages=[{"role": "user", "content": "Is it late?"}],
                                                    response_format={"type": "json_schema", "json_schema": schema})
        assert isinstance(json.loads(structured.choices[0].message.content)["late"], bool)
