"""OpenAI's Responses API read in the chat-completions form: a response object as a chat.completion, its
typed events as chunks. The gateway uses it to read what an upstream that speaks Responses answers a
Responses client, whose own events go out untouched (relay.py, `Source.native`): the first token, the
finish, the usage, an error, and the chat form the cache keeps.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from firsttoken.sse import BROKEN, DONE, data_event, data_field

Json = dict[str, Any]


def finish_reason(response: Json) -> str:
    if response.get("status") == "incomplete":
        return "length" if (response.get("incomplete_details") or {}).get("reason") == "max_output_tokens" \
            else "content_filter"
    calls = any(isinstance(item, dict) and item.get("type") == "function_call" for item in response.get("output") or ())
    return "tool_calls" if calls else "stop"


def usage(raw: Any) -> Json | None:
    if not isinstance(raw, dict):
        return None
    prompt, output = raw.get("input_tokens") or 0, raw.get("output_tokens") or 0
    cached = (raw.get("input_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (raw.get("output_tokens_details") or {}).get("reasoning_tokens") or 0
    return {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": raw.get("total_tokens") or
            prompt + output, "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": reasoning}}


def completion(response: Json) -> Json:
    """The chat.completion a response object says."""
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[Json] = []
    for item in response.get("output") or ():
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            text += [part.get("text") or part.get("refusal") or "" for part in item.get("content") or ()
                     if isinstance(part, dict)]
        elif kind == "reasoning":
            reasoning += [part.get("text") or "" for part in (item.get("content") or item.get("summary") or ())
                          if isinstance(part, dict)]
        elif kind == "function_call":
            calls.append({"id": item.get("call_id"), "type": "function",
                          "function": {"name": item.get("name"), "arguments": item.get("arguments") or ""}})
    message: Json = {"role": "assistant", "content": "".join(text) if text else None}
    if calls:
        message["tool_calls"] = calls
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    return {"id": response.get("id") or "", "object": "chat.completion",
            "created": response.get("created_at") or int(time.time()), "model": response.get("model") or "",
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason(response)}],
            "usage": usage(response.get("usage"))}


class ResponsesStream:
    """One Responses stream read as chat chunks: text, reasoning and function-call deltas; the finish and
    usage from the final response; failures as an error event."""

    def __init__(self, include_usage: bool, upstream: str) -> None:
        self.include_usage = include_usage
        self.upstream = upstream
        self.id = ""
        self.model = ""
        self.created = int(time.time())
        self.calls: dict[str, int] = {}  # a function call item's id → its tool_calls index
        self.done = False

    def feed(self, event: bytes) -> list[bytes]:
        if self.done:
            return []
        payload = data_field(event)
        if payload is None:
            return []
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            return self._fail(f"upstream {self.upstream} sent a stream event that is not a JSON object", BROKEN)
        kind = str(data.get("type") or "")
        if kind == "response.created":
            response = data.get("response") or {}
            self.id, self.model = str(response.get("id") or ""), str(response.get("model") or "")
            return [self._chunk({"role": "assistant", "content": ""})]
        if kind == "response.output_text.delta" and data.get("delta"):
            return [self._chunk({"content": data["delta"]})]
        if kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta") and data.get("delta"):
            return [self._chunk({"reasoning_content": data["delta"]})]
        if kind == "response.output_item.added" and (data.get("item") or {}).get("type") == "function_call":
            item = data["item"]
            index = self.calls[str(item.get("id"))] = len(self.calls)
            return [self._chunk({"tool_calls": [{"index": index, "id": item.get("call_id"), "type": "function",
                                                 "function": {"name": item.get("name"), "arguments": ""}}]})]
        if kind == "response.function_call_arguments.delta" and data.get("delta"):
            number = self.calls.get(str(data.get("item_id")))
            if number is not None:
                return [self._chunk({"tool_calls": [{"index": number, "function": {"arguments": data["delta"]}}]})]
        if kind in ("response.completed", "response.incomplete"):
            return self._end(data.get("response") or {})
        if kind in ("response.failed", "error"):
            error = (data.get("response") or {}).get("error") if kind == "response.failed" else data
            message = (error or {}).get("message") if isinstance(error, dict) else None
            return self._fail(str(message or f"upstream {self.upstream} reported a failure"))
        return []

    def finish(self) -> list[bytes]:
        if self.done:
            return []
        return self._fail(f"upstream {self.upstream} ended the stream early (before response.completed)", BROKEN)

    def _chunk(self, delta: Json, finish: str | None = None) -> bytes:
        return data_event({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                           "model": self.model, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                             "finish_reason": finish}]})

    def _end(self, response: Json) -> list[bytes]:
        self.done = True
        out = [self._chunk({}, finish_reason(response))]
        counts = usage(response.get("usage"))
        if self.include_usage and counts is not None:
            out.append(data_event({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                                   "model": self.model, "choices": [], "usage": counts}))
        return [*out, DONE]

    def _fail(self, message: str, code: str | None = None) -> list[bytes]:
        """The stream's failure as an error chunk: the upstream's own (no code), or a stream that broke (BROKEN)."""
        self.done = True
        return [data_event({"error": {"message": message, "type": "upstream_error", "param": None, "code": code}}),
                DONE]
