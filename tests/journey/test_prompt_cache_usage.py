"""What an upstream's own prompt cache served, from its usage counts: in the journey (and its verdict), the
journey log and the metrics, for whole answers and streams. The upstream is the simulated region, whose
prefix cache reports `prompt_tokens_details.cached_tokens` as providers do."""

from __future__ import annotations

import sqlite3

import httpx
import openai

from support.gateway_process import GatewayProcess
from support.waiting import wait_until

STANDING = " ".join(f"rule{i} holds" for i in range(600))  # an agent's long standing instructions


def test_cached_input_tokens_reach_the_journey_the_log_and_the_metrics(tmp_path) -> None:
    log = tmp_path / "journeys.db"
    settings = {"sim": {"models": ["llama-3.2-1b"]}, "journeys": {"log": str(log)}}
    with GatewayProcess(settings, tmp_path) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="none", max_retries=0)
        messages = [{"role": "system", "content": STANDING}, {"role": "user", "content": "first?"}]
        cold = client.chat.completions.with_raw_response.create(model="sim/llama-3.2-1b", max_tokens=5,
                                                                 messages=messages)
        messages[-1]["content"] = "second?"
        warm = client.chat.completions.with_raw_response.create(model="sim/llama-3.2-1b", max_tokens=5,
                                                                 messages=messages)
        cached = warm.parse().usage.prompt_tokens_details.cached_tokens
        assert cached > 1000
        messages[-1]["content"] = "third?"
        streamed = client.chat.completions.with_raw_response.create(
            model="sim/llama-3.2-1b", max_tokens=5, messages=messages, stream=True,
            stream_options={"include_usage": True})
        stream_id = streamed.headers["x-request-id"]
        list(streamed.parse())

        def journey(request_id: str) -> dict:
            return httpx.get(f"{gateway.url}/v1/journeys/{request_id}", timeout=10).json()

        first, second, third = (journey(r.headers["x-request-id"]) for r in (cold, warm, streamed))
        assert first["cached_input_tokens"] == 0 and second["cached_input_tokens"] == cached
        assert third["cached_input_tokens"] >= cached  # a stream's usage chunk says it too
        assert f"prompt cache served {cached} of {second['input_tokens']} input tokens" in second["verdict"]

        def counted() -> float | None:
            """The cached input tokens /metrics counts (it takes the journeys' batch first, but a request's
            journey joins the batch as its handler ends, a moment after its client has the answer)."""
            metrics = httpx.get(f"{gateway.url}/metrics", timeout=10).text
            line = next((row for row in metrics.splitlines()
                         if row.startswith("firsttoken_upstream_cached_input_tokens_total")), None)
            return None if line is None else float(line.rsplit(" ", 1)[1])

        expected = cached + third["cached_input_tokens"]
        wait_until(lambda: counted() == expected, f"{expected} cached input tokens in /metrics")
    # the gateway's shutdown wrote the last journeys to the log
    with sqlite3.connect(log) as db:
        kept = dict(db.execute("SELECT id, cached_tokens FROM journeys"))
    assert kept[stream_id] == third["cached_input_tokens"]
    assert kept[warm.headers["x-request-id"]] == cached
