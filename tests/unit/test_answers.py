"""What counts as an answer, and as a complete one, in OpenAI's chat-completions format."""

from __future__ import annotations

import json

import pytest

from firsttoken.answers import NotAnAnswer, answer_gap, completion_body, stream_gap, whole_answer_gap


def completion(**choice: object) -> bytes:
    base = {"index": 0, "message": {"role": "assistant", "content": "Paris."}, "finish_reason": "stop"}
    return json.dumps({"object": "chat.completion", "choices": [{**base, **choice}]}).encode()


def event(delta: dict, finish: str | None = None) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).encode()


@pytest.mark.parametrize("body", [b"", b"<html>hi</html>", completion()[:40], b"[1, 2]", b'{"choices": "x"}'])
def test_what_is_no_answer_at_all(body: bytes) -> None:
    with pytest.raises(NotAnAnswer):
        completion_body(body)


def test_a_whole_answer_is_complete_with_a_message_and_a_finish_reason() -> None:
    assert whole_answer_gap(completion()) is None
    tool_call = {"role": "assistant", "content": None,
                 "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    assert whole_answer_gap(completion(message=tool_call, finish_reason="tool_calls")) is None
    assert whole_answer_gap(completion(finish_reason=None)) == "a choice without a finish reason"
    assert whole_answer_gap(completion(message={"role": "assistant", "content": ""})) == "no content or tool call"
    assert whole_answer_gap(b'{"choices": []}') == "no choices"


def test_a_stream_is_complete_with_content_and_a_finish_reason() -> None:
    role, token, finish = event({"role": "assistant"}), event({"content": "Hi"}), event({}, "stop")
    assert stream_gap([role, token, finish]) is None
    assert stream_gap([b"\n\n".join([role, token]), b": a comment", finish]) is None  # pieces hold several
    assert stream_gap([role, token]) == "no finish reason"
    assert stream_gap([role, finish]) == "no content or tool call"
    assert stream_gap([token, b"data: {oops", finish]).startswith("an event that is not JSON")
    assert stream_gap([token, b'data: {"error": {"message": "x"}}', finish]) == "an error event"
    assert answer_gap("sse", b"\n\n".join([token, finish]) + b"\n\n") is None
    assert answer_gap("json", b"not json").startswith("not JSON")


def test_every_choice_of_a_stream_must_finish() -> None:
    def of(index: int, delta: dict, finish: str | None = None) -> bytes:
        return b"data: " + json.dumps({"choices": [{"index": index, "delta": delta,
                                                    "finish_reason": finish}]}).encode()

    both = [of(0, {"content": "A"}), of(1, {"content": "B"}), of(0, {}, "stop"), of(1, {}, "stop")]
    assert stream_gap(both) is None
    assert stream_gap(both[:3]) == "a choice without a finish reason"
    assert stream_gap([of(0, {"content": "A"}), of(0, {}, "")]) == "no finish reason"  # empty is none


def test_a_named_error_event_is_an_error() -> None:
    finish = event({}, "stop")
    assert stream_gap([event({"content": "Hi"}), finish, b'event: error\ndata: {"message": "overloaded"}']) == \
        "an error event"
