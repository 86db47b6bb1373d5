"""A cached answer given back in the shape the client asked for, whichever shape it was stored in.

A stream stored as events is replayed as those events (the upstream's own chunks); asked for whole, the
events are folded into one chat.completion, as OpenAI's SDKs fold them. A whole completion asked for as
a stream becomes the chunks OpenAI would have sent: the role, the content, the tool calls, the finish,
and the usage when the client asks for it.
"""

from __future__ import annotations

from typing import Any

import orjson

from firsttoken.cache.entry import Entry


class ReplayError(ValueError):
    """A stored answer that cannot be given back in the shape asked for (damaged in the store, or kept
    by a version that did not check answers): it is dropped, and the request goes upstream."""


def replay(entry: Entry, stream: bool, include_usage: bool) -> bytes:
    """The stored answer in the shape asked for: a stream's events (the closing comment and [DONE] are the
    caller's), or a whole chat.completion; ReplayError when it cannot be."""
    try:
        return as_stream(entry, include_usage) if stream else as_completion(entry)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:  # orjson's errors are ValueErrors
        raise ReplayError(f"a stored {entry.kind} answer could not be replayed as "
                          f"{'a stream' if stream else 'a whole answer'}: {type(exc).__name__}: {exc}") from exc


def as_stream(entry: Entry, include_usage: bool) -> bytes:
    """SSE events, each ended by a blank line (the closing comment and [DONE] are the caller's)."""
    if entry.kind == "sse":
        return b"".join(e + b"\n\n" for e in _events(entry.body) if include_usage or not is_usage_chunk(e))
    return completion_chunks(orjson.loads(entry.body), include_usage)


def as_completion(entry: Entry) -> bytes:
    if entry.kind == "json":
        return entry.body
    return orjson.dumps(_fold(_events(entry.body)))


def _events(body: bytes) -> list[bytes]:
    return [e for e in body.split(b"\n\n") if e.strip()]


def _payload(event: bytes) -> Any:
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            return orjson.loads(line[5:].strip())
    return None


def is_usage_chunk(event: bytes) -> bool:
    """The stream's last chunk: usage and no choices (sent only to clients that ask for it)."""
    if event.find(b'"usage"') < 0:  # find, not `in` (see relay.py)
        return False
    chunk = _payload(event)
    return isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict) and not chunk.get("choices")


def _fold(events: list[bytes]) -> dict[str, Any]:
    """The chat.completion that a stream of chunks adds up to."""
    completion: dict[str, Any] = {"object": "chat.completion", "choices": []}
    choices: dict[int, dict[str, Any]] = {}
    for event in events:
        chunk = _payload(event)
        if not isinstance(chunk, dict):
            continue
        for field in ("id", "created", "model", "system_fingerprint", "service_tier"):
            if chunk.get(field) is not None:
                completion[field] = chunk[field]
        if isinstance(chunk.get("usage"), dict):
            completion["usage"] = chunk["usage"]
        for part in chunk.get("choices") or []:
            choice = choices.setdefault(part.get("index", 0), {
                "index": part.get("index", 0), "message": {"role": "assistant", "content": None},
                "finish_reason": None, "logprobs": None})
            _add_delta(choice["message"], part.get("delta") or {})
            if part.get("finish_reason") is not None:
                choice["finish_reason"] = part["finish_reason"]
            if part.get("logprobs"):
                content = (choice["logprobs"] or {"content": []})
                content["content"] = content.get("content", []) + (part["logprobs"].get("content") or [])
                choice["logprobs"] = content
    completion["choices"] = [choices[i] for i in sorted(choices)]
    return completion


def _add_delta(message: dict[str, Any], delta: dict[str, Any]) -> None:
    for field, value in delta.items():
        if field == "role" and value:
            message["role"] = value
        elif field == "tool_calls":
            calls = message.setdefault("tool_calls", [])
            for call in value or []:
                index = call.get("index", len(calls))
                while len(calls) <= index:
                    calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                target = calls[index]
                if call.get("id"):
                    target["id"] = call["id"]
                if call.get("type"):
                    target["type"] = call["type"]
                function = call.get("function") or {}
                target["function"]["name"] += function.get("name") or ""
                target["function"]["arguments"] += function.get("arguments") or ""
        elif isinstance(value, str):  # content, reasoning_content, refusal: pieces of one text
            message[field] = (message.get(field) or "") + value
        elif value is not None:
            message[field] = value


def completion_chunks(completion: dict[str, Any], include_usage: bool) -> bytes:
    """The chunks a stream of this completion would have carried."""
    head = {"id": completion.get("id", ""), "object": "chat.completion.chunk",
            "created": completion.get("created", 0), "model": completion.get("model", "")}
    if completion.get("system_fingerprint") is not None:
        head["system_fingerprint"] = completion["system_fingerprint"]
    out = []

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> None:
        out.append(b"data: " + orjson.dumps({**head, "choices": choices, **extra}) + b"\n\n")

    for choice in completion.get("choices") or []:
        index, message = choice.get("index", 0), choice.get("message") or {}
        chunk([{"index": index, "delta": {"role": message.get("role", "assistant"), "content": ""},
                "finish_reason": None}])
        for field in ("reasoning_content", "content", "refusal"):
            if message.get(field):
                chunk([{"index": index, "delta": {field: message[field]}, "finish_reason": None}])
        if message.get("tool_calls"):
            calls = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
            chunk([{"index": index, "delta": {"tool_calls": calls}, "finish_reason": None}])
        chunk([{"index": index, "delta": {}, "finish_reason": choice.get("finish_reason") or "stop"}])
    if include_usage and isinstance(completion.get("usage"), dict):
        chunk([], usage=completion["usage"])
    return b"".join(out)
