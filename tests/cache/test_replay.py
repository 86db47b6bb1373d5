"""Replays in either shape: a stored stream replays as its own events or folds into the completion the
SDK would build; a stored completion streams as OpenAI's chunks; usage only when asked for."""

from __future__ import annotations

import orjson

from firsttoken.cache.entry import Entry
from firsttoken.cache.replay import as_completion, as_stream

USAGE = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-4o-mini"}


def event(choices: list, **extra) -> bytes:
    return b"data: " + orjson.dumps({**HEAD, "choices": choices, **extra})


STREAM = b"\n\n".join([
    event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]),
    event([{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]),
    event([{"index": 0, "delta": {"content": "lo"}, "finish_reason": None}]),
    event([{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                   "function": {"name": "get_weather", "arguments": "{\"ci"}}]},
            "finish_reason": None}]),
    event([{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "ty\":\"Lagos\"}"}}]},
            "finish_reason": None}]),
    event([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]),
    event([], usage=USAGE),
]) + b"\n\n"


def stored(kind: str, body: bytes) -> Entry:
    return Entry(kind, body, "app", "up/m", 0.0, 1e12)


def test_a_stored_stream_replays_as_its_own_events_with_usage_only_when_asked() -> None:
    assert as_stream(stored("sse", STREAM), include_usage=True) == STREAM
    without = as_stream(stored("sse", STREAM), include_usage=False)
    assert b'"usage"' not in without and without.count(b"data: ") == 6


def test_a_stored_stream_folds_into_the_completion() -> None:
    completion = orjson.loads(as_completion(stored("sse", STREAM)))
    assert completion["id"] == "chatcmpl-1" and completion["object"] == "chat.completion"
    assert completion["usage"] == USAGE
    (choice,) = completion["choices"]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Hello"
    assert choice["message"]["tool_calls"] == [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": "{\"city\":\"Lagos\"}"}}]


def test_a_completion_streams_and_folds_back_to_itself() -> None:
    completion = orjson.loads(as_completion(stored("sse", STREAM)))
    streamed = as_stream(stored("json", orjson.dumps(completion)), include_usage=True)
    assert streamed.endswith(b"\n\n") and all(e.startswith(b"data: {") for e in streamed.split(b"\n\n") if e)
    assert orjson.loads(as_completion(stored("sse", streamed))) == completion
    assert b'"usage"' not in as_stream(stored("json", orjson.dumps(completion)), include_usage=False)
