"""An agent built with the OpenAI Agents SDK runs its tool loop to completion against `firsttoken sim`, the
real command, over the Responses API and over chat completions: the model calls the tool, the SDK runs
it, and the model answers with its result in hand."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from support.gateway_process import free_port
from support.waiting import wait_until

from .test_published_live import answers

set_tracing_disabled(True)  # the SDK would otherwise send its traces to OpenAI


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "firsttoken", "sim", "--port", str(port),
                                "--model", "llama-3.2-1b"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/v1"
    wait_until(lambda: answers(url + "/models"), "firsttoken sim to answer")
    yield url
    process.terminate()
    process.wait(10)


@pytest.mark.parametrize("api", [OpenAIResponsesModel, OpenAIChatCompletionsModel])
def test_an_agent_runs_its_tool_loop(sim_url: str, api: type) -> None:
    looked_up: list[int] = []

    @function_tool
    def lookup_order(number: int) -> str:
        """Where an order is, by its number."""
        looked_up.append(number)
        return f"order {number} left Lagos yesterday"

    agent = Agent(name="support", instructions="Answer questions about orders.", tools=[lookup_order],
                  model=api("llama-3.2-1b", AsyncOpenAI(base_url=sim_url, api_key="k", max_retries=0)))
    result = Runner.run_sync(agent, "Where is my order? Please lookup order 1946.", max_turns=4)
    assert len(looked_up) == 1 and isinstance(looked_up[0], int)  # called once, with a valid argument
    assert result.final_output
    # answers that end on their own (at most the trace's longest), not at the SDK's max_tokens
    assert all(0 < r.usage.output_tokens <= 1000 for r in result.raw_responses)
    kinds = [item.type for item in result.new_items]
    assert kinds == ["tool_call_item", "tool_call_output_item", "message_output_item"]
