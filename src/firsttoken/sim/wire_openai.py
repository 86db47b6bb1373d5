"""OpenAI chat completions, as the region speaks them."""

from __future__ import annotations

import itertools
import time
from typing import Any

import orjson

from firsttoken.sim import text
from firsttoken.sim.text import Answer, split_by_call
from firsttoken.sim.tools import ToolUse
from firsttoken.sim.wire import (
    NO_PARAMETERS,
    Ask,
    BadRequest,
    Renderer,
    conversation,
    identity,
    positive_int,
    sim_timing,
    stop_list,
    tool_list,
)

DEFAULT_MAX_TOKENS = 128
_ids = itertools.count(1)

_FINISH = {"length": "length", "stop": "stop", "tool_calls": "tool_calls"}
_TOOL_SHAPE = "{'type': 'function', 'function': {'name': ..., 'parameters': {...}}}"


def _definition(entry: dict[str, Any]) -> tuple[Any, Any, Any]:
    function = entry.get("function") if entry.get("type") == "function" else None
    if not isinstance(function, dict):
        return "", "", None
    return function.get("name"), function.get("description"), function.get("parameters", NO_PARAMETERS)


# What `json_object` asks for: any JSON object; the region answers with one that carries its words.
JSON_OBJECT = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
               "additionalProperties": False}


def answer_schema(value: Any) -> dict[str, Any] | None:
    """The JSON schema `response_format` asks the answer to satisfy; None for plain text."""
    kind = value.get("type") if isinstance(value, dict) else None
    if value is None or kind == "text":
        return None
    if kind == "json_object":
        return JSON_OBJECT
    if kind == "json_schema":
        spec = value.get("json_schema")
        if isinstance(spec, dict) and isinstance(spec.get("name"), str) and isinstance(spec.get("schema", {}), dict):
            return spec.get("schema", {})
        raise BadRequest(400, "'response_format.json_schema' must be an object with a 'name' and a 'schema'.",
                         "response_format")
    raise BadRequest(400, "'response_format.type' must be 'text', 'json_object' or 'json_schema'.",
                     "response_format")


def tool_use(body: dict[str, Any], messages: list[Any]) -> ToolUse | None:
    """The request's tools and tool_choice; None when it offers none."""
    if body.get("tools") in (None, []):
        return None
    tools = tool_list(body["tools"], _definition, _TOOL_SHAPE)
    choice = body.get("tool_choice", "auto")
    if isinstance(choice, dict):
        function = choice.get("function")
        choice = function.get("name") if isinstance(function, dict) else None
        if choice not in {tool.name for tool in tools}:
            raise BadRequest(400, "'tool_choice' names a function that is not among the tools.", "tool_choice")
    elif choice not in ("auto", "required", "none"):
        raise BadRequest(400, "'tool_choice' must be 'none', 'auto', 'required' or "
                              "{'type': 'function', 'function': {'name': ...}}.", "tool_choice")
    last = messages[-1] if messages else {}
    return ToolUse(tools, choice, body.get("parallel_tool_calls") is not False,
                   isinstance(last, dict) and last.get("role") == "tool")


class OpenAIChat:
    def parse(self, body: Any, models: list[str]) -> Ask:
        body, messages, model = conversation(body, models, "'messages' must be a non-empty list.")
        param = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        limit = body.get(param)
        max_tokens = DEFAULT_MAX_TOKENS if limit is None else positive_int(limit, param)
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        system = " ".join(text.text_of(m.get("content")) for m in messages
                          if isinstance(m, dict) and m.get("role") in ("system", "developer"))
        kind, content, message = identity(body, messages, system)
        return Ask(model, text.prompt_tokens(messages), max_tokens, stop_list(body.get("stop"), "stop"),
                   bool(body.get("stream")), include_usage, kind, content, body.get("ignore_eos") is True,
                   message, tool_use(body, messages), answer_schema(body.get("response_format")))

    call_prefix = "call_sim"

    def renderer(self, ask: Ask, answer: Answer) -> Renderer:
        return OpenAIToolRenderer(ask, answer) if answer.calls else OpenAIRenderer(ask, answer)

    def error_body(self, status: int, message: str, param: str | None, code: str | None,
                   kind: str | None = None) -> bytes:
        kind = kind or {429: "requests", 503: "server_error"}.get(status, "invalid_request_error")
        return orjson.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})


class OpenAIRenderer:
    def __init__(self, ask: Ask, answer: Answer) -> None:
        self.ask, self.answer = ask, answer
        self.base = {"id": f"chatcmpl-sim{next(_ids)}", "object": "chat.completion.chunk",
                     "created": int(time.time()), "model": ask.model}
        # Every content chunk is this prefix, the JSON string of the piece, and this suffix.
        head = orjson.dumps({**self.base, "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": None}]})
        self._prefix, self._suffix = head.split(b'""', 1)
        self._prefix = b"data: " + self._prefix

    @property
    def usage(self) -> dict[str, int]:
        completion = len(self.answer.pieces)
        return {"prompt_tokens": self.ask.prompt_tokens, "completion_tokens": completion,
                "total_tokens": self.ask.prompt_tokens + completion}

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        payload = {**self.base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + orjson.dumps(payload) + b"\n\n"

    def whole(self) -> bytes:
        message = {"role": "assistant", "content": "".join(self.answer.pieces)}
        return orjson.dumps({**self.base, "object": "chat.completion", "choices": [
            {"index": 0, "message": message, "finish_reason": _FINISH[self.answer.finish]}], "usage": self.usage})

    def opening(self) -> bytes:
        first = self.piece(0) if self.answer.pieces else b""
        return self._chunk({"role": "assistant", "content": ""}) + first

    def piece(self, index: int) -> bytes:
        return self._prefix + orjson.dumps(self.answer.pieces[index]) + self._suffix + b"\n\n"

    def closing(self, decode_ms: float) -> bytes:
        tail = self._chunk({}, _FINISH[self.answer.finish])
        if self.ask.include_usage:
            tail += b"data: " + orjson.dumps({**self.base, "choices": [], "usage": self.usage}) + b"\n\n"
        return tail + sim_timing(decode_ms) + b"data: [DONE]\n\n"


class OpenAIToolRenderer(OpenAIRenderer):
    """An answer that calls tools: a `tool_calls` delta per token (the call's id and name with its first),
    its finish `tool_calls`."""

    def __init__(self, ask: Ask, answer: Answer) -> None:
        super().__init__(ask, answer)
        self._events = []
        for index, (call, pieces) in enumerate(split_by_call(answer)):
            for number, piece in enumerate(pieces):
                delta: dict[str, Any] = {"index": index, "function": {"arguments": piece}}
                if number == 0:
                    delta = {"index": index, "id": call.id, "type": "function",
                             "function": {"name": call.name, "arguments": piece}}
                self._events.append(self._chunk({"tool_calls": [delta]}))

    def whole(self) -> bytes:
        calls = [{"id": call.id, "type": "function", "function": {"name": call.name, "arguments": "".join(pieces)}}
                 for call, pieces in split_by_call(self.answer)]
        message = {"role": "assistant", "content": None, "tool_calls": calls}
        return orjson.dumps({**self.base, "object": "chat.completion", "choices": [
            {"index": 0, "message": message, "finish_reason": _FINISH[self.answer.finish]}], "usage": self.usage})

    def opening(self) -> bytes:
        return self._chunk({"role": "assistant", "content": None}) + self.piece(0)

    def piece(self, index: int) -> bytes:
        return self._events[index]
