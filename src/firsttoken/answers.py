"""What an answer in OpenAI's chat-completions format must hold: the checks that tell a real answer from
a broken one (a page, a body cut in half, a stream of garbage), and a whole one from a partial one.

Two levels. An upstream's 200 that is not a chat completion (or a list of embeddings) at all is no answer:
the client gets a 502 and the next target may try (`completion_body`, `embeddings_body`). An answer that
is one but could be cut short (no finish reason, nothing in it) reaches the client as it is, but is not
kept for anyone else (`whole_answer_gap`, `stream_gap`): the edge cache and identical requests in flight
only get answers that are complete.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import orjson

from firsttoken.redact import REDACTED, Redactor
from firsttoken.sse import data_field, event_name

_TOKEN_FIELDS = ("content", "reasoning_content", "reasoning", "tool_calls", "refusal", "function_call")
_MESSAGE_FIELDS = ("content", "tool_calls", "function_call", "refusal")
_TEXT_FIELDS = ("content", "reasoning_content", "reasoning", "refusal")


class NotAnAnswer(ValueError):
    """An upstream's 200 whose body is not what the request asks for."""


def is_token_bearing(chunk: Any) -> bool:
    """A chunk carrying content, reasoning or a tool-call delta; the role-only first chunk is not."""
    if not isinstance(chunk, dict):
        return False
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict) and any(delta.get(f) for f in _TOKEN_FIELDS):
            return True
        if choice.get("text"):  # legacy completions chunks
            return True
    return False


def _object(body: bytes, what: str) -> dict[str, Any]:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise NotAnAnswer(f"not JSON ({_start(body)})") from None
    if not isinstance(parsed, dict):
        raise NotAnAnswer(f"JSON, but not {what}")
    return parsed


def completion_body(body: bytes) -> dict[str, Any]:
    """The chat.completion a whole answer's body holds; NotAnAnswer when it holds none."""
    completion = _object(body, "a chat completion")
    choices = completion.get("choices")
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise NotAnAnswer(f"JSON without a list of choices ({_start(body)})")
    return completion


def embeddings_body(body: bytes) -> None:
    """NotAnAnswer unless the body is a list of embeddings."""
    if not isinstance(_object(body, "a list of embeddings").get("data"), list):
        raise NotAnAnswer(f"JSON without a list of embeddings ({_start(body)})")


def whole_answer_gap(body: bytes) -> str | None:
    """Why a whole answer is not complete, or None when it is: no error in it, every choice has a message
    and a finish reason that is not a failure, and at least one says something (text, a tool call, a
    refusal)."""
    try:
        completion = completion_body(body)
    except NotAnAnswer as exc:
        return str(exc)
    if completion.get("error") is not None:
        return "an error beside the answer"
    choices = completion["choices"]
    if not choices:
        return "no choices"
    said = False
    for choice in choices:
        message = choice.get("message")
        if not isinstance(message, dict):
            return "a choice without a message"
        if gap := _finish_gap(choice.get("finish_reason")):
            return gap
        said = said or any(message.get(f) for f in _MESSAGE_FIELDS)
    return None if said else "no content or tool call"


def _finish_gap(reason: Any) -> str | None:
    if not reason:
        return "a choice without a finish reason"
    return "a finish reason that says it failed" if reason in FAILED_FINISH else None


# Finish reasons that end an answer because generating it failed (OpenRouter's "error", vLLM's "abort",
# DeepSeek's "insufficient_system_resource"): the client hears so, but nobody else gets the answer.
FAILED_FINISH = frozenset({"error", "abort", "aborted", "cancelled", "canceled", "timeout",
                           "insufficient_system_resource"})


def stream_gap(events: Iterable[bytes]) -> str | None:
    """Why a stream's events (each without its blank line; pieces may hold several) are not a complete
    answer, or None when they are: every event parsed, one carried content or a tool call, every choice
    that appeared got a finish reason that is not a failure, and none was an error. Whether it closed
    with [DONE] is the relay's to know."""
    return _read_stream(events)[0]


def answer_gap(kind: Literal["json", "sse"], answer: bytes, credentials: Redactor | None = None) -> str | None:
    """Why an answer of either shape may not be kept, or None when it may. An answer that quoted a
    credential is not one to share: one where some was redacted on the way (a key cut across two events
    leaves its tail unredacted in the second), and, with `credentials`, a stream whose text, pieced
    together, quotes one (a key cut so small that no one event held enough of it to find)."""
    if answer.find(REDACTED.encode()) >= 0:
        return "a credential in its text"
    if kind == "json":
        return whole_answer_gap(answer)
    gap, text = _read_stream((answer,))
    if gap is None and credentials and credentials.text(text) != text:
        return "a credential in its text"
    return gap


def _read_stream(events: Iterable[bytes]) -> tuple[str | None, str]:
    """(why the stream is not a complete answer or None, the text its chunks carried, pieced together)."""
    said = False
    choices: set[int] = set()
    finished: set[int] = set()
    text: list[str] = []
    for piece in events:
        for event in piece.split(b"\n\n"):
            if event_name(event) == b"error":
                return "an error event", ""
            payload = data_field(event)
            if payload is None:  # a comment, or a blank
                continue
            try:
                chunk = orjson.loads(payload)
            except orjson.JSONDecodeError:
                return f"an event that is not JSON ({_start(payload)})", ""
            if not isinstance(chunk, dict):
                return "an event that is not an object", ""
            if chunk.get("error") is not None:
                return "an error event", ""
            said = said or is_token_bearing(chunk)
            for choice in chunk.get("choices") or ():
                if not isinstance(choice, dict):
                    return "a choice that is not an object", ""
                index = choice.get("index", 0)
                if not isinstance(index, int):
                    return "a choice without a number", ""
                choices.add(index)
                reason = choice.get("finish_reason")
                if reason:
                    if gap := _finish_gap(reason):
                        return gap, ""
                    finished.add(index)
                delta = choice.get("delta")
                if isinstance(delta, dict):
                    text += _delta_text(delta)
    if not said:
        return "no content or tool call", ""
    if not finished:
        return "no finish reason", ""
    return (None if choices <= finished else "a choice without a finish reason"), "".join(text)


def _delta_text(delta: dict[str, Any]) -> list[str]:
    """The text a chunk's delta adds: content, reasoning, a refusal, tool calls' names and arguments."""
    found = [value for field in _TEXT_FIELDS if isinstance(value := delta.get(field), str)]
    for call in delta.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            found += [value for field in ("name", "arguments") if isinstance(value := function.get(field), str)]
    return found


def _start(data: bytes) -> str:
    """The start of a body, for a message: enough to recognise an HTML page or a cut."""
    text = data[:80].decode("utf-8", "replace").strip()
    return repr(text + ("…" if len(data) > 80 else "")) if text else "empty"
