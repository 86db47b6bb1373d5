"""The agents and SDKs developers use, pointed at `firsttoken serve` with nothing configured (the offline
region behind it), each completing a task that calls one of its tools: Claude Code headless over Messages,
Codex CLI over Responses, an OpenAI Agents SDK agent over Responses, and the anthropic and openai SDKs'
own tool round trips. `npm install` (package.json) installs the two CLIs; nothing is downloaded when they
run."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from support.gateway_process import GatewayProcess

set_tracing_disabled(True)  # the SDK would otherwise send its traces to OpenAI

BIN = Path(__file__).resolve().parents[2] / "node_modules" / ".bin"
MODEL = "llama-3.1-8b"  # the offline region's model, as the README says to ask for it
# Nothing that could reach a real provider or phone home: the agents see only the gateway.
QUIET = {"DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
         "DISABLE_ERROR_REPORTING": "1"}


def agent_bin(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `npm install` in the repository (the README's test command does)")
    return str(path)


def clean_env(home: Path) -> dict[str, str]:
    """The environment without any provider's key or base URL, with a home of the test's own."""
    env = {k: v for k, v in os.environ.items()
           if not k.endswith(("_API_KEY", "_BASE_URL")) and not k.startswith(("CODEX_", "CLAUDE_", "FIRSTTOKEN_"))}
    return {**env, **QUIET, "HOME": str(home)}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    workdir = tmp_path_factory.mktemp("agents")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    with GatewayProcess({}, workdir, env=env) as gateway:
        yield gateway


def test_claude_code_completes_a_prompt_with_a_tool(gateway: GatewayProcess, tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_text("hello from Lagos\n")
    env = {**clean_env(tmp_path / "home"), "ANTHROPIC_BASE_URL": gateway.url, "ANTHROPIC_API_KEY": "placeholder",
           "ANTHROPIC_DEFAULT_HAIKU_MODEL": MODEL}
    done = subprocess.run([agent_bin("claude"), "-p", "Use the Read tool to read hello.txt, then say what it says.",
                           "--output-format", "json", "--model", MODEL, "--max-turns", "4"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["subtype"] == "success", result
    assert result["num_turns"] == 2 and result["result"]  # a tool call, its result, then the answer
    assert result["usage"]["output_tokens"] > 0
    asked = [j for j in httpx.get(gateway.url + "/v1/journeys", params={"limit": 100}).json()["data"]
             if j["model"] == MODEL and j["status"] == 200 and j["stream"]]
    assert asked and all(j["phases"]["ttft"] > 0 for j in asked)


def test_codex_cli_completes_a_prompt_with_a_tool(gateway: GatewayProcess, tmp_path: Path) -> None:
    home = tmp_path / "codex"
    home.mkdir()
    (home / "config.toml").write_text(f'''model = "{MODEL}"
model_provider = "firsttoken"

[model_providers.firsttoken]
name = "firsttoken"
base_url = "{gateway.url}/v1"
env_key = "FIRSTTOKEN_KEY"
wire_api = "responses"
''')
    work = tmp_path / "work"
    work.mkdir()
    env = {**clean_env(tmp_path / "home"), "CODEX_HOME": str(home), "FIRSTTOKEN_KEY": "placeholder"}
    done = subprocess.run([agent_bin("codex"), "exec", "--skip-git-repo-check", "--json",
                           "Call get_goal to see the current goal, then say what it is."],
                          cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    kinds = [event.get("type") for event in events]
    assert "turn.completed" in kinds and "turn.failed" not in kinds and "error" not in kinds, kinds
    items = [event["item"] for event in events if event.get("type") == "item.completed"]
    assert any(item.get("type") == "agent_message" and item.get("text") for item in items), items
    assert any(item.get("type") not in ("agent_message", "reasoning") for item in items), items  # the tool


def test_an_agents_sdk_agent_runs_its_tool_loop_through_the_gateway(gateway: GatewayProcess) -> None:
    looked_up: list[int] = []

    @function_tool
    def lookup_order(number: int) -> str:
        """Where an order is, by its number."""
        looked_up.append(number)
        return f"order {number} left Lagos yesterday"

    client = AsyncOpenAI(base_url=gateway.url + "/v1", api_key="placeholder", max_retries=0)
    agent = Agent(name="support", instructions="Answer questions about orders.", tools=[lookup_order],
                  model=OpenAIResponsesModel(MODEL, client))
    result = Runner.run_sync(agent, "Where is my order? Please lookup order 1946.", max_turns=4)
    assert len(looked_up) == 1 and isinstance(looked_up[0], int)
    assert result.final_output
    assert [item.type for item in result.new_items] == ["tool_call_item", "tool_call_output_item",
                                                         "message_output_item"]


def test_the_sdks_tool_round_trips(gateway: GatewayProcess) -> None:
    weather = {"name": "get_weather", "description": "The weather in a city.",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    claude = anthropic.Anthropic(base_url=gateway.url, api_key="placeholder", max_retries=0)
    question = [{"role": "user", "content": "Get weather for Lagos."}]
    asked = claude.messages.create(model=MODEL, max_tokens=300, tools=[weather], messages=question)
    [use] = [block for block in asked.content if block.type == "tool_use"]
    answered = claude.messages.create(model=MODEL, max_tokens=100, tools=[weather], messages=[
        *question, {"role": "assistant", "content": asked.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "31 °C"}]}])
    assert asked.stop_reason == "tool_use" and answered.content[0].text
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="placeholder", max_retries=0)
    tool = {"type": "function", "name": "get_weather", "parameters": weather["input_schema"]}
    first = client.responses.create(model=MODEL, input="Get weather for Lagos.", tools=[tool])
    [call] = [item for item in first.output if item.type == "function_call"]
    second = client.responses.create(model=MODEL, previous_response_id=first.id, tools=[tool], input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "31 °C"}])
    assert second.output_text
