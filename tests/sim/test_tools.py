"""Tool calls and structured output from the simulated region, through the real openai and anthropic SDKs:
calls well formed for each format, arguments valid for each tool's schema, a text answer once the tools'
results are in, and JSON answers valid for the response format's schema."""

from __future__ import annotations

import json
from enum import StrEnum

import anthropic
import jsonschema
import openai
import pytest
from pydantic import BaseModel

from firsttoken.sim import tools
from support.sim_region import region_on_loopback

MODEL = "llama-3.2-1b"
WEATHER = {"type": "object", "additionalProperties": False, "required": ["city", "unit", "days"],
           "properties": {"city": {"type": "string", "minLength": 2},
                          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                          "days": {"type": "integer", "minimum": 1, "maximum": 7}}}
TIME = {"type": "object", "required": ["zone"], "properties": {"zone": {"type": "string"}}}
OPENAI_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The forecast for a city",
                                      "parameters": WEATHER, "strict": True}},
    {"type": "function", "function": {"name": "get_time", "description": "The local time in a time zone",
                                      "parameters": TIME}},
]
ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                    "input_schema": t["function"]["parameters"]} for t in OPENAI_TOOLS]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}


@pytest.fixture(scope="module")
def port():
    with region_on_loopback(models=[MODEL]) as (port, _region):
        yield port


@pytest.fixture(scope="module")
def client(port):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)


@pytest.fixture(scope="module")
def claude(port):
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="k", max_retries=0)


def ask(question: str) -> list[dict]:
    return [{"role": "user", "content": question}]


def test_a_tool_call_round_trip_in_chat_completions(client) -> None:
    messages = ask("Will I need an umbrella in Lagos this week? get weather please")
    first = client.chat.completions.create(model=MODEL, max_tokens=1000, messages=messages, tools=OPENAI_TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    assert first.usage.completion_tokens > 0
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": '{"rain": true}'}]
    second = client.chat.completions.create(model=MODEL, max_tokens=1000, messages=messages, tools=OPENAI_TOOLS)
    assert second.choices[0].finish_reason == "stop" and second.choices[0].message.content
    assert not second.choices[0].message.tool_calls


def test_streamed_calls_are_the_whole_ones(client) -> None:
    messages = ask("get_weather in Accra, and get_time for Africa/Accra")
    whole = client.chat.completions.create(model=MODEL, max_tokens=1000, messages=messages, tools=OPENAI_TOOLS)
    calls: dict[int, dict[str, str]] = {}
    stream = client.chat.completions.create(model=MODEL, max_tokens=1000, messages=messages, tools=OPENAI_TOOLS,
                                            stream=True)
    finish = None
    for chunk in stream:
        delta = chunk.choices[0].delta
        finish = chunk.choices[0].finish_reason or finish
        for part in delta.tool_calls or []:
            call = calls.setdefault(part.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += part.id or ""
            call["name"] += part.function.name or ""
            call["arguments"] += part.function.arguments or ""
    assert finish == "tool_calls"
    assert [(c.id, c.function.name, c.function.arguments) for c in whole.choices[0].message.tool_calls] == \
        [(c["id"], c["name"], c["arguments"]) for c in calls.values()]
    assert [c["name"] for c in calls.values()] == ["get_weather", "get_time"]  # both named: in parallel
    for call in calls.values():
        jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])


def test_tool_choice_and_parallel_calls(client) -> None:
    both = ask("get_weather and get_time in Nairobi")

    def names(**options) -> list[str]:
        answer = client.chat.completions.create(model=MODEL, max_tokens=1000, messages=both, tools=OPENAI_TOOLS,
                                                **options)
        return [c.function.name for c in answer.choices[0].message.tool_calls or []]

    assert names() == ["get_weather", "get_time"]
    assert names(parallel_tool_calls=False) == ["get_weather"]
    assert names(tool_choice="none") == []
    assert names(tool_choice={"type": "function", "function": {"name": "get_time"}}) == ["get_time"]
    unnamed = client.chat.completions.create(model=MODEL, max_tokens=1000, tools=OPENAI_TOOLS, tool_choice="required",
                                             messages=ask("What's the local time in a zone?"))
    assert [c.function.name for c in unnamed.choices[0].message.tool_calls] == ["get_time"]  # by description


def test_bad_tools_are_refused_in_the_format(client, claude) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=ask("hi"), tools=[{"type": "function"}])
    assert bad.value.body["param"] == "tools[0]"
    with pytest.raises(openai.BadRequestError) as unknown:
        client.chat.completions.create(model=MODEL, messages=ask("hi"), tools=OPENAI_TOOLS,
                                       tool_choice={"type": "function", "function": {"name": "nope"}})
    assert unknown.value.body["param"] == "tool_choice"
    broken = [{"type": "function", "function": {"name": "f", "parameters": {"type": "objekt"}}}]
    with pytest.raises(openai.BadRequestError) as schema:
        client.chat.completions.create(model=MODEL, messages=ask("call f"), tools=broken)
    assert "not a valid JSON schema" in schema.value.body["message"]
    with pytest.raises(anthropic.BadRequestError) as claude_bad:
        claude.messages.create(model=MODEL, max_tokens=100, messages=ask("hi"), tools=[{"description": "x"}])
    assert claude_bad.value.body["error"]["type"] == "invalid_request_error"


def test_a_tool_use_round_trip_in_messages(claude) -> None:
    messages = ask("What's the weather in Kigali? use get_weather")
    first = claude.messages.create(model=MODEL, max_tokens=1000, messages=messages, tools=ANTHROPIC_TOOLS)
    assert first.stop_reason == "tool_use"
    [use] = first.content
    assert use.type == "tool_use" and use.name == "get_weather" and use.id.startswith("toolu_")
    jsonschema.validate(use.input, WEATHER)
    with claude.messages.stream(model=MODEL, max_tokens=1000, messages=messages, tools=ANTHROPIC_TOOLS) as stream:
        streamed = stream.get_final_message()
    assert [(b.id, b.name, b.input) for b in streamed.content] == [(use.id, use.name, use.input)]
    assert streamed.stop_reason == "tool_use" and streamed.usage.output_tokens == first.usage.output_tokens
    messages += [{"role": "assistant", "content": [use.model_dump()]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}]
    second = claude.messages.create(model=MODEL, max_tokens=1000, messages=messages, tools=ANTHROPIC_TOOLS)
    assert second.stop_reason == "end_turn" and second.content[0].type == "text"


def test_messages_tool_choice(claude) -> None:
    both = ask("get_weather and get_time in Dakar")
    parallel = claude.messages.create(model=MODEL, max_tokens=1000, messages=both, tools=ANTHROPIC_TOOLS)
    assert [b.name for b in parallel.content] == ["get_weather", "get_time"]
    single = claude.messages.create(model=MODEL, max_tokens=1000, messages=both, tools=ANTHROPIC_TOOLS,
                                    tool_choice={"type": "auto", "disable_parallel_tool_use": True})
    assert [b.name for b in single.content] == ["get_weather"]
    # A forced tool is Anthropic's structured output: the answer is that tool's input.
    forced = claude.messages.create(model=MODEL, max_tokens=1000, messages=ask("Summarise this review"),
                                    tools=ANTHROPIC_TOOLS, tool_choice={"type": "tool", "name": "get_time"})
    assert [b.name for b in forced.content] == ["get_time"] and forced.stop_reason == "tool_use"
    none = claude.messages.create(model=MODEL, max_tokens=50, messages=both, tools=ANTHROPIC_TOOLS,
                                  tool_choice={"type": "none"})
    assert none.content[0].type == "text"


class Unit(StrEnum):
    ms = "ms"
    s = "s"


class Hop(BaseModel):
    name: str
    latency: float
    unit: Unit


class Journey(BaseModel):
    hops: list[Hop]
    verdict: str
    retries: int | None


def test_structured_output_parses_into_the_model(client) -> None:
    answer = client.chat.completions.parse(model=MODEL, max_tokens=4000, response_format=Journey,
                                           messages=ask("Where did the time go?"))
    choice = answer.choices[0]
    assert choice.finish_reason == "stop" and isinstance(choice.message.parsed, Journey)
    plain = client.chat.completions.create(model=MODEL, max_tokens=4000, messages=ask("Where did the time go?"),
                                           response_format={"type": "json_object"})
    assert isinstance(json.loads(plain.choices[0].message.content), dict)
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=ask("x"), response_format={"type": "xml"})
    assert bad.value.body["param"] == "response_format"


@pytest.mark.parametrize("schema", [
    Journey.model_json_schema(),  # $defs and $ref, an enum, anyOf with null
    {"type": "object", "required": ["points"], "properties": {"points": {
        "type": "array", "minItems": 2, "maxItems": 4,
        "items": {"type": "object", "required": ["lat", "lon"],
                  "properties": {"lat": {"type": "number", "minimum": -90, "maximum": 90},
                                 "lon": {"type": "number", "minimum": -180, "maximum": 180}}}}}},
    {"type": "object", "required": ["flag", "tags", "nested"], "properties": {
        "flag": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
        "nested": {"type": "object", "required": ["deep"], "properties": {
            "deep": {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer", "const": 3}}}}}}},
])
def test_values_are_valid_for_their_schema_and_repeatable(schema: dict) -> None:
    for request in range(10):
        value = tools.value_for(schema, "a test", 0, {"request": request})
        jsonschema.validate(value, schema)
        assert value == tools.value_for(schema, "a test", 0, {"request": request})
