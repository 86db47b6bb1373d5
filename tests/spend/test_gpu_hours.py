"""A self-hosted route priced per GPU-hour (the simulated region, at its GPU's shipped hourly rate): each
request pays for its share of the GPUs' time, and a budget holds what the route's measured speed says a
request may take, so a key stays within it once the route has answered a request."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import openai
import pytest

from support.gateway_process import GatewayProcess
from support.waiting import SLACK

KEY = "gpu-hour-client-key-0001"
ASK = {"model": "sim/llama-3.2-1b", "max_tokens": 24, "messages": [{"role": "user", "content": "Name a river."}]}


def settings(budget: dict | None = None) -> dict:
    key: dict = {"name": "team", "key": KEY}
    if budget is not None:
        key["budget"] = budget
    # H100s in Virginia, at the shipped on-demand rate; no cache: every request goes to the GPUs. A cost is the
    # wall time the gateway measured: 20 ms a decode step makes a request's GPU time (~0.5 s) dwarf what a busy
    # machine adds to it, so that what a request costs and what its hold says agree.
    return {"sim": {"models": ["llama-3.2-1b"], "region": "aws:us-east-1", "efficiency": {"step_overhead_ms": 20}},
            "keys": [key], "cache": False}


def cost(raw: Any) -> float:
    """The USD an answer says it cost (x-firsttoken-cost)."""
    said = dict(part.partition("=")[::2] for part in raw.headers["x-firsttoken-cost"].split("; "))
    return float(said["usd"])


def test_a_gpu_hour_route_keeps_a_key_within_its_budget(tmp_path: Path) -> None:
    (tmp_path / "measure").mkdir()
    (tmp_path / "capped").mkdir()
    with GatewayProcess(settings(), tmp_path / "measure") as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEY, max_retries=0)
        answers = [client.chat.completions.with_raw_response.create(**ASK) for _ in range(3)]
    assert len({a.parse().usage.completion_tokens for a in answers}) == 1  # the same answer each time
    costs = [cost(a) for a in answers]
    one = statistics.median(costs)
    assert min(costs) > 0 and max(costs) < SLACK * min(costs), costs  # the same GPU time, near enough
    budget = 2.5 * one
    with GatewayProcess(settings({"usd_per_day": budget}), tmp_path / "capped") as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEY, max_retries=0)
        # The first request has no speed to hold against (it is let in); from the second on, each holds what
        # the measured speed says it takes, so the third, which would pass the budget, is refused.
        spent = [cost(client.chat.completions.with_raw_response.create(**ASK)) for _ in range(2)]
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(**ASK)
        assert refused.value.code == "budget_exceeded"
        assert sum(spent) <= budget
