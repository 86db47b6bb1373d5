"""Request bodies of the two client formats read into chat's form (Anthropic Messages, OpenAI Responses), as
hypothesis strategies (plausible fields mixed with arbitrary JSON, so that both the paths a real client takes
and every wrong type are tried), and the properties their parsers keep."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from hypothesis import strategies as st

from firsttoken.errors import GatewayError
from firsttoken.formats import messages_request, responses_request
from firsttoken.server import validate

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10)
texts = st.text(max_size=12)
some = st.one_of  # a field's plausible values, or anything at all


def block(kinds: list[str]) -> st.SearchStrategy[Any]:
    """A content block or part of one of `kinds`, with plausible or arbitrary fields."""
    return st.fixed_dictionaries({"type": some(st.sampled_from(kinds), json_values)},
                                 optional={"text": some(texts, json_values), "id": some(texts, json_values),
                                           "name": some(texts, json_values), "input": json_values,
                                           "tool_use_id": some(texts, json_values), "content": json_values,
                                           "source": json_values, "image_url": json_values,
                                           "call_id": some(texts, json_values), "output": json_values,
                                           "arguments": json_values, "file_data": json_values})


anthropic_blocks = block(["text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking",
                          "server_tool_use", "web_search_tool_result"])
messages_bodies = st.fixed_dictionaries(
    {"model": some(st.just("m"), json_values), "max_tokens": some(st.integers(1, 4096), json_values),
     "messages": some(st.lists(st.fixed_dictionaries({
         "role": some(st.sampled_from(["user", "assistant", "system"]), json_values),
         "content": some(texts, st.lists(anthropic_blocks, max_size=3), json_values)}), max_size=3), json_values)},
    optional={"system": some(texts, st.lists(anthropic_blocks, max_size=2), json_values),
              "stream": some(st.booleans(), json_values), "tools": some(st.lists(st.fixed_dictionaries(
                  {"name": some(texts, json_values)}, optional={"type": some(st.sampled_from(
                      ["custom", "web_search_20250305", "bash_20250124"]), json_values),
                      "input_schema": json_values}), max_size=2), json_values),
              "tool_choice": json_values, "thinking": json_values, "stop_sequences": json_values,
              "temperature": json_values, "metadata": json_values})

response_parts = block(["input_text", "output_text", "input_image", "input_file", "refusal", "text"])
responses_items = st.fixed_dictionaries(
    {}, optional={"type": some(st.sampled_from(["message", "function_call", "function_call_output", "reasoning",
                                                "item_reference", "web_search_call"]), json_values),
                  "role": some(st.sampled_from(["user", "assistant", "system", "developer"]), json_values),
                  "content": some(texts, st.lists(response_parts, max_size=3), json_values),
                  "call_id": some(texts, json_values), "name": some(texts, json_values),
                  "arguments": json_values, "output": json_values})
responses_bodies = st.fixed_dictionaries(
    {"model": some(st.just("m"), json_values),
     "input": some(texts, st.lists(responses_items, max_size=4), json_values)},
    optional={"instructions": json_values, "max_output_tokens": json_values, "stream": json_values,
              "tools": some(st.lists(st.fixed_dictionaries({"type": some(st.sampled_from(
                  ["function", "web_search", "namespace", "custom"]), json_values)},
                  optional={"name": json_values, "parameters": json_values}), max_size=2), json_values),
              "tool_choice": json_values, "text": json_values, "reasoning": json_values,
              "background": json_values, "store": json_values})


def messages_body_is_refused_or_read(body: dict) -> None:
    """A Messages body is refused by name, or read into a chat request the gateway itself accepts."""
    _refused_or_read(body, messages_request.check, messages_request.chat_request)


def responses_body_is_refused_or_read(body: dict) -> None:
    """A Responses body is refused by name, or read into a chat request the gateway itself accepts."""
    _refused_or_read(body, responses_request.check, lambda checked, skipped: responses_request.chat_request(
        checked, responses_request.input_items(checked), skipped))


def _refused_or_read(body: dict, check: Callable[[dict], object],
                     read: Callable[[dict, list[GatewayError]], dict]) -> None:
    skipped: list[GatewayError] = []
    try:
        check(body)
        chat = read(body, skipped)
    except GatewayError as error:
        skipped = [error]
    for refusal in skipped:  # refused whole, or a part only a chat upstream cannot take
        assert refusal.status == 400 and refusal.message, refusal
    if not skipped:
        validate.chat_request(chat)  # what it reads is a request the gateway itself accepts,
        orjson.dumps(chat)  # and can send on (a 64-bit serialiser refuses bigger integers)
