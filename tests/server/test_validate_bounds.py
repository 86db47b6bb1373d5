"""The bounds on a request body's shape (config's `limits`), checked as it is parsed: each refusal is a 400
that names the bound and its setting, and a body within them passes untouched."""

from __future__ import annotations

import json
import sys

import orjson
import pytest

from firsttoken.cache.key import exact_key
from firsttoken.config import Limits
from firsttoken.errors import GatewayError
from firsttoken.server.validate import check_bounds, parse_json_object

LIMITS = Limits()


def nested(depth: int, leaf: object = "x") -> object:
    """`depth` levels of arrays and objects in turn, around `leaf`."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def refusal(raw: bytes, limits: Limits = LIMITS) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        parse_json_object(raw, limits)
    assert info.value.status == 400 and info.value.type == "invalid_request_error"
    return info.value


def chat(**fields: object) -> bytes:
    # the standard library's encoder, not orjson's: it writes the 255 levels that orjson refuses to
    return json.dumps({"model": "chat", "messages": [{"role": "user", "content": "hi"}], **fields}).encode()


@pytest.mark.parametrize("depth", [65, 255, 1000, 2000, 100_000])
def test_too_deep_is_a_400_naming_the_setting(depth: int) -> None:
    error = refusal(b'{"model": "chat", "messages": ' + b"[" * depth + b"]" * depth + b"}")
    assert error.code == "too_deep" and "limits.max_json_depth" in error.message and "64" in error.message
    if depth < 1000:  # past orjson's own bound (1024) the parser refuses before the field is known
        assert error.param == "messages"


def test_depth_counts_the_body_itself() -> None:
    # the body is level 1: 63 more levels fit in 64, one more does not
    assert parse_json_object(orjson.dumps({"tools": nested(63)}), LIMITS)
    assert refusal(orjson.dumps({"tools": nested(64)})).param == "tools"


def test_a_deep_tool_schema_names_tools() -> None:
    schema = {"type": "object", "properties": nested(250)}
    error = refusal(chat(tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}]))
    assert (error.code, error.param) == ("too_deep", "tools")


def test_the_depth_setting_is_honoured() -> None:
    body = orjson.dumps({"messages": nested(20)})
    assert parse_json_object(body, LIMITS)
    assert refusal(body, Limits(max_json_depth=16)).code == "too_deep"


def test_deep_bodies_need_no_recursion() -> None:
    # far past Python's recursion limit, and past the depth allowed: the walk keeps its own list
    limits = Limits(max_json_depth=250)
    deep = nested(sys.getrecursionlimit() * 3)
    with pytest.raises(GatewayError) as info:
        check_bounds({"messages": deep}, limits)
    assert info.value.code == "too_deep"


def test_too_many_messages() -> None:
    limits = Limits(max_messages=3)
    assert parse_json_object(orjson.dumps({"messages": [{"role": "user", "content": "x"}] * 3}), limits)
    error = refusal(orjson.dumps({"messages": [{"role": "user", "content": "x"}] * 4}), limits)
    assert (error.code, error.param) == ("too_many_messages", "messages")
    assert "limits.max_messages" in error.message and "4" in error.message


def test_too_many_embeddings_inputs() -> None:
    error = refusal(orjson.dumps({"model": "e", "input": ["a"] * 11}), Limits(max_messages=10))
    assert (error.code, error.param) == ("too_many_inputs", "input")
    assert "limits.max_messages" in error.message


@pytest.mark.parametrize("where", ["value", "nested", "key", "nested key"])
def test_string_too_long(where: str) -> None:
    limits = Limits(max_string_bytes=1024)
    long = "é" * 513  # 1026 bytes of UTF-8 in 513 characters: bytes are what count
    body = {"value": {"model": long}, "nested": {"messages": [{"content": [{"text": long}]}]},
            "key": {long: 1}, "nested key": {"tools": [{long: 1}]}}[where]
    error = refusal(orjson.dumps(body), limits)
    assert error.code == "string_too_long" and "limits.max_string_bytes" in error.message
    assert error.param == (None if where == "key" else next(iter(body)))
    assert "1026" in error.message


def test_a_string_at_the_bound_passes() -> None:
    limits = Limits(max_string_bytes=1024)
    assert parse_json_object(chat(user="é" * 512), limits)  # 1024 bytes


def test_odd_field_names_are_not_echoed() -> None:
    error = refusal(orjson.dumps({"x" * 500: nested(100)}))
    assert error.code == "too_deep" and error.param is None and "x" * 65 not in error.message


def test_a_typical_body_passes_unchanged() -> None:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
        "required": ["city"]}}}
    body = {"model": "chat", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}] * 200,
            "tools": [tool] * 8, "stream": True, "temperature": 0.2}
    raw = orjson.dumps(body)
    assert parse_json_object(raw, LIMITS) == body
    check_bounds(body, LIMITS)  # the string checks too, as for a body larger than max_string_bytes


def test_other_json_errors_stay_invalid_json() -> None:
    assert refusal(b"{").code == "invalid_json"
    assert refusal(b"[]").code == "invalid_json"


def test_the_deepest_body_allowed_can_be_reserialised() -> None:
    # the setting's own ceiling (250) leaves room for the level the cache key wraps a body in
    limits = Limits(max_json_depth=250)
    body = parse_json_object(chat(tools=nested(249)), limits)
    assert orjson.loads(orjson.dumps(body)) == body
    assert exact_key("tenant", ["fake/echo"], body)
