"""POST /v1/responses: the openai SDK's Responses API, unchanged, through the gateway to the simulated
region, two ways: translated for its chat completions, and passed through to its own /v1/responses (an
upstream with `responses: true`). The gateway keeps the responses that `previous_response_id` continues."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from pydantic import BaseModel

from conftest import CLIENT_KEY
from support.gateway_process import GatewayProcess
from support.sim_process import SimProcess

OTHER_KEY = "sk-other-tenant-key-0000000000"
MODEL, NATIVE = "llama", "native-llama"
WEATHER = {"type": "function", "name": "weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                          "additionalProperties": False}}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    workdir: Path = tmp_path_factory.mktemp("responses")
    with SimProcess(workdir, "--model", "llama-3.1-8b", "--model", "qwen3-8b") as sim:
        settings = {"upstreams": {"sim": {"url": sim.url, "api": "openai"},
                                  "native": {"url": sim.url, "api": "openai", "responses": True}},
                    "models": {MODEL: ["sim/llama-3.1-8b"], "thinker": ["sim/qwen3-8b"],
                               NATIVE: ["native/llama-3.1-8b"]},
                    "cache": {"backend": "memory"},
                    "keys": [{"name": "app", "key": CLIENT_KEY}, {"name": "other", "key": OTHER_KEY}]}
        with GatewayProcess(settings, workdir) as gateway:
            yield gateway


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)


def test_create_with_a_string_input(client: openai.OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="Say hello from Lagos.", instructions="Be brief.",
                                       max_output_tokens=40)
    assert response.object == "response" and response.status in ("completed", "incomplete")
    assert response.output_text and response.output[0].type == "message"
    assert response.instructions == "Be brief." and response.max_output_tokens == 40
    assert response.usage.input_tokens > 0 and 0 < response.usage.output_tokens <= 40


def test_stream_events_in_order(client: openai.OpenAI) -> None:
    with client.responses.stream(model=MODEL, input="Stream something.", max_output_tokens=30) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[2:4] == ["response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          f"response.{final.status}"]
    assert "response.output_text.delta" in kinds and final.output_text


def test_sequence_numbers_count_every_event(gateway: GatewayProcess) -> None:
    with httpx.stream("POST", gateway.url + "/v1/responses", headers={"Authorization": f"Bearer {CLIENT_KEY}"},
                      json={"model": MODEL, "input": "numbers", "stream": True, "max_output_tokens": 10}) as response:
        payloads = [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))


def test_a_function_call_round_trip_continued_by_id(client: openai.OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="What is the weather in Lagos?", tools=[WEATHER],
                                    tool_choice="required")
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "weather" and isinstance(json.loads(call.arguments)["city"], str)
    second = client.responses.create(model=MODEL, previous_response_id=first.id, tools=[WEATHER], input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "31 °C, humid"}])
    assert second.output_text and second.previous_response_id == first.id
    third = client.responses.create(model=MODEL, previous_response_id=second.id, input="And tomorrow?")
    assert third.output_text


def test_streamed_function_call(client: openai.OpenAI) -> None:
    with client.responses.stream(model=MODEL, input="Weather in Accra?", tools=[WEATHER],
                                 tool_choice="required") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    [call] = [item for item in final.output if item.type == "function_call"]
    assert "city" in json.loads(call.arguments) and "response.function_call_arguments.delta" in kinds
    assert "response.function_call_arguments.done" in kinds


def test_continuing_is_per_key_and_needs_a_kept_response(client: openai.OpenAI, gateway: GatewayProcess) -> None:
    kept = client.responses.create(model=MODEL, input="remember me")
    other = openai.OpenAI(base_url=gateway.url + "/v1", api_key=OTHER_KEY, max_retries=0)
    with pytest.raises(openai.NotFoundError) as missing:
        other.responses.create(model=MODEL, previous_response_id=kept.id, input="and me?")
    assert missing.value.code == "previous_response_not_found"
    unkept = client.responses.create(model=MODEL, input="forget me", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, previous_response_id=unkept.id, input="again?")
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, previous_response_id="resp_nothing", input="?")


def test_bad_input_gets_openais_error(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model=MODEL, input=[])
    assert bad.value.param == "input"
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model=MODEL, input="hi", max_output_tokens=0)
    assert bad.value.param == "max_output_tokens"


def test_hosted_tools_are_not_offered_to_a_chat_upstream(client: openai.OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="Search the web for Lagos.",
                                       tools=[{"type": "web_search"}])
    assert response.output_text and response.tools[0].type == "web_search"


def test_reasoning_comes_back_as_a_reasoning_item(client: openai.OpenAI) -> None:
    with client.responses.stream(model="thinker", input="Think first.", reasoning={"effort": "low"},
                                 max_output_tokens=2000) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert final.output[0].type == "reasoning" and final.output[0].content[0].text
    assert "response.reasoning_text.delta" in kinds and final.output[-1].type == "message"


def test_a_repeat_is_a_cache_hit_with_a_new_id(client: openai.OpenAI) -> None:
    asked = {"model": MODEL, "input": "a question asked twice", "max_output_tokens": 20}
    first = client.responses.with_raw_response.create(**asked)
    again = client.responses.with_raw_response.create(**asked)
    assert again.headers["x-firsttoken-cache"].startswith("hit")
    assert again.parse().output_text == first.parse().output_text and again.parse().id != first.parse().id
    streamed = client.responses.with_raw_response.create(**asked, stream=True)
    assert streamed.headers["x-firsttoken-cache"].startswith("hit")


class Weather(BaseModel):
    city: str
    celsius: int


def test_structured_output_through_responses_and_chat(client: openai.OpenAI) -> None:
    parsed = client.responses.parse(model=MODEL, input="Weather in Lagos as JSON.", text_format=Weather)
    assert isinstance(parsed.output_parsed, Weather)
    completion = client.chat.completions.parse(model=MODEL, messages=[{"role": "user", "content": "Lagos weather"}],
                                               response_format=Weather)
    assert isinstance(completion.choices[0].message.parsed, Weather)


# --- an upstream that speaks Responses: the request and its events pass through ---------------------

def test_native_create_and_stream_are_the_upstreams_own(client: openai.OpenAI) -> None:
    whole = client.responses.create(model=NATIVE, input="Through, untouched.", max_output_tokens=30)
    assert whole.id.startswith("resp_sim") and whole.output_text  # the region's own response
    events = list(client.responses.create(model=NATIVE, input="Streamed through.", max_output_tokens=30,
                                          stream=True))
    assert events[0].type == "response.created" and events[-1].type in ("response.completed", "response.incomplete")
    final = events[-1].response
    assert final.id.startswith("resp_sim") and final.output[0].content[0].text
    assert [event.sequence_number for event in events] == list(range(len(events)))


def test_native_responses_are_continued_by_the_gateway_on_any_upstream(client: openai.OpenAI) -> None:
    """The gateway keeps the conversation and sends it whole: the region never saw the first response's
    id (its own memory is not asked), and a translated upstream can continue a native response too."""
    first = client.responses.create(model=NATIVE, input="What is the weather in Lagos?", tools=[WEATHER],
                                    tool_choice="required", store=True)
    [call] = [item for item in first.output if item.type == "function_call"]
    second = client.responses.create(model=NATIVE, previous_response_id=first.id, tools=[WEATHER], input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "31 °C"}])
    assert second.output_text and second.id.startswith("resp_sim")
    third = client.responses.create(model=MODEL, previous_response_id=second.id, input="And tomorrow?")
    assert third.output_text and not third.id.startswith("resp_sim")


def test_native_hosted_tools_reach_the_upstream(client: openai.OpenAI) -> None:
    response = client.responses.create(model=NATIVE, input="Search the web for Lagos.", tools=[{"type": "web_search"}])
    assert response.output_text and response.id.startswith("resp_sim")
