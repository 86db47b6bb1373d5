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

from firsttoken.sse import data_field, event_name

_TOKEN_FIELDS = ("content", "reasoning_content", "reasoning", "tool_calls", "refusal", "function_call")
_MESSAGE_FIELDS = ("content", "tool_calls", "function_call", "refusal")


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
    """Why a whole answer is not complete, or None when it is: every choice has a message and a finish
    reason, and at least one says something (text, a tool call, a refusal)."""
    try:
        completion = completion_body(body)
    except NotAnAnswer as exc:
        return str(exc)
    choices = completion["choices"]
    if not choices:
        return "no choices"
    said = False
    for choice in choices:
        message = choice.get("message")
        if not isinstance(message, dict):
            return "a choice without a message"
        if not choice.get("finish_reason"):
            return "a choice without a finish reason"
        said = said or any(message.get(f) for f in _MESSAGE_FIELDS)
    return None if said else "no content or tool call"


def stream_gap(events: Iterable[bytes]) -> str | None:
    """Why a stream's events (each without its blank line; pieces may hold several) are not a complete
    answer, or None when they are: every event parsed, one carried content or a tool call, every choice
    that appeared got a finish reason, and none was an error. Whether it closed with [DONE] is the
    relay's to know."""
    said = False
    choices: set[Any] = set()
    finished: set[Any] = set()
    for piece in events:
        for event in piece.split(b"\n\n"):
            if event_name(event) == b"error":
                return "an error event"
            payload = data_field(event)
            if payload is None:  # a comment, or a blank
                continue
            try:
                chunk = orjson.loads(payload)
            except orjson.JSONDecodeError:
                return f"an event that is not JSON ({_start(payload)})"
            if not isinstance(chunk, dict):
                return "an event that is not an object"
            if "error" in chunk:
                return "an error event"
            said = said or is_token_bearing(chunk)
            for choice in chunk.get("choices") or ():
                if isinstance(choice, dict):
                    choices.add(choice.get("index", 0))
                    if choice.get("finish_reason"):
                        finished.add(choice.get("index", 0))
    if not said:
        return "no content or tool call"
    if not finished:
        return "no finish reason"
    return None if choices <= finished else "a choice without a finish reason"


def answer_gap(kind: Literal["json", "sse"], answer: bytes) -> str | None:
    """Why an answer of either shape may not be kept, or None when it may."""
    return whole_answer_gap(answer) if kind == "json" else stream_gap((answer,))


def _start(data: bytes) -> str:
    """The start of a body, for a message: enough to recognise an HTML page or a cut."""
    text = data[:80].decode("utf-8", "replace").strip()
    return repr(text + ("…" if len(data) > 80 else "")) if text else "empty"
