"""OpenAI's Responses API spoken by the simulated region, through the real openai SDK: text, the typed
stream, function calls and their outputs, previous_response_id, structured output, reasoning and
max_output_tokens."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from pydantic import BaseModel

from support.sim_region import region_on_loopback

MODEL, THINKER = "llama-3.2-1b", "qwen3-8b"
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
           "required": ["city", "days"], "additionalProperties": False}
TOOLS = [{"type": "function", "name": "get_weather", "description": "The forecast for a city",
          "parameters": WEATHER, "strict": True}]
LONG = " ".join(f"rule{i}" for i in range(300))


@pytest.fixture(scope="module")
def client():
    with region_on_loopback(models=[MODEL, THINKER], gpu="h200", precision="fp8") as (port, _region):
        yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)


def test_text_whole_and_streamed(client) -> None:
    whole = client.responses.create(model=MODEL, input="Why is Virginia far from Lagos?", max_output_tokens=4000)
    assert whole.status == "completed" and whole.output_text and whole.id.startswith("resp_")
    assert whole.usage.output_tokens == len(whole.output_text.split(" "))
    with client.responses.stream(model=MODEL, input="Why is Virginia far from Lagos?",
                                 max_output_tokens=4000) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == whole.output_text
    assert final.output_text == whole.output_text and final.usage.output_tokens == whole.usage.output_tokens


def test_a_function_call_round_trip_with_previous_response_id(client) -> None:
    called = client.responses.create(model=MODEL, input=f"{LONG}. Will it rain? get weather for Lagos", tools=TOOLS)
    [call] = [item for item in called.output if item.type == "function_call"]
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    with client.responses.stream(model=MODEL, input=f"{LONG}. Will it rain? get weather for Lagos",
                                 tools=TOOLS) as stream:
        kinds = [event.type for event in stream]
        streamed = stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    assert [(i.call_id, i.arguments) for i in streamed.output] == [(call.call_id, call.arguments)]
    answered = client.responses.create(model=MODEL, previous_response_id=called.id, tools=TOOLS,
                                       input=[{"type": "function_call_output", "call_id": call.call_id,
                                               "output": '{"rain": false}'}])
    assert [item.type for item in answered.output] == ["message"] and answered.output_text
    # the stored conversation came back in front of the new input: the replica had its prefix already
    assert answered.usage.input_tokens > called.usage.input_tokens
    assert answered.usage.input_tokens_details.cached_tokens >= called.usage.input_tokens - 16
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, previous_response_id="resp_nope", input="hi")


class Forecast(BaseModel):
    city: str
    rain: bool
    days: list[int]


def test_structured_output_and_reasoning(client) -> None:
    parsed = client.responses.parse(model=MODEL, input="The forecast, as JSON", text_format=Forecast)
    assert isinstance(parsed.output_parsed, Forecast)
    thought = client.responses.create(model=THINKER, input="Think first", reasoning={"effort": "low"},
                                      max_output_tokens=4000)
    assert [item.type for item in thought.output] == ["reasoning", "message"]
    assert thought.usage.output_tokens_details.reasoning_tokens > 0
    with client.responses.stream(model=THINKER, input="Think first", reasoning={"effort": "low"},
                                 max_output_tokens=4000) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert final.output_text == thought.output_text and kinds.count("response.output_item.added") == 2


def test_max_output_tokens_and_bad_requests(client) -> None:
    cut = client.responses.create(model=MODEL, input="Tell me everything", max_output_tokens=3)
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    assert cut.usage.output_tokens == 3
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model=MODEL, input=[])
    assert bad.value.body["param"] == "input"
    with pytest.raises(openai.BadRequestError) as tool:
        client.responses.create(model=MODEL, input="hi", tools=["web_search"])
    assert tool.value.body["param"] == "tools[0]"
    # tools it never calls (a provider's own, as agents send them along) are accepted and left alone
    searched = client.responses.create(model=MODEL, input="get weather in Accra",
                                       tools=[{"type": "web_search"}, *TOOLS])
    assert [item.type for item in searched.output] == ["function_call"]
    unstored = client.responses.create(model=MODEL, input="Forget this", store=False, max_output_tokens=5)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, previous_response_id=unstored.id, input="And?")
