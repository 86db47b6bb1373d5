"""Answers in Anthropic's Messages format, from the chat completions the gateway relays and keeps.

`message` turns a whole chat.completion into a Message. `MessagesEvents` turns a chat stream, as the
gateway writes it to a client (chunks, comments, an error event, `[DONE]`), into Messages events in
their real order: message_start, then per content block (thinking, text, tool_use) its start, deltas and
stop, then message_delta with the stop reason and usage, then message_stop. Events already in Anthropic's
format (named events, from an Anthropic upstream whose stream passes through) go out as they came.
"""

from __future__ import annotations

from typing import Any

import orjson

from firsttoken.errors import GatewayError
from firsttoken.sse import CLOSING, data_field, event_name

Json = dict[str, Any]

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
                "content_filter": "refusal"}
# Anthropic's error types by status (docs.anthropic.com, "Errors"): its SDKs pick their exception by status.
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error",
               529: "overloaded_error"}
_KEPT_TYPES = frozenset(ERROR_TYPES.values()) | {"api_error"}
_DONE = b"[DONE]"


def message(completion: Json) -> Json:
    """The Message a whole chat.completion says (its first choice: Messages has no `n`)."""
    choice = (completion.get("choices") or [{}])[0]
    said = choice.get("message") or {}
    content: list[Json] = []
    reasoning = said.get("reasoning_content") or said.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    for field in ("content", "refusal"):
        if isinstance(said.get(field), str) and said[field]:
            content.append({"type": "text", "text": said[field]})
    for call in said.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id") or "", "name": function.get("name") or "",
                        "input": _arguments(function.get("arguments"))})
    return {"id": message_id(completion.get("id")), "type": "message", "role": "assistant",
            "model": completion.get("model") or "", "content": content,
            "stop_reason": stop_reason(choice.get("finish_reason")), "stop_sequence": None,
            "usage": usage(completion.get("usage"))}


def message_id(chat_id: Any) -> str:
    text = chat_id if isinstance(chat_id, str) and chat_id else "gateway"
    return text if text.startswith("msg_") else f"msg_{text}"


def stop_reason(finish: Any) -> str:
    return STOP_REASONS.get(finish, "end_turn") if isinstance(finish, str) else "end_turn"


def usage(chat_usage: Any) -> Json:
    """Anthropic counts input apart from what its prompt cache read; OpenAI's prompt count holds both."""
    counts = chat_usage if isinstance(chat_usage, dict) else {}
    details = counts.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    cached = cached if isinstance(cached, int) else 0
    prompt, output = (value if isinstance(value := counts.get(key), int) else 0
                      for key in ("prompt_tokens", "completion_tokens"))
    return {"input_tokens": max(prompt - cached, 0), "output_tokens": output,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}


def _arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return orjson.loads(arguments) if arguments.strip() else {}
        except orjson.JSONDecodeError:
            return {"arguments": arguments}  # a model's broken JSON, kept where the client can see it
    return arguments if isinstance(arguments, dict) else {}


def error_object(error: GatewayError) -> Json:
    """A gateway error in Anthropic's shape."""
    kind = ERROR_TYPES.get(error.status) or (error.type if error.type in _KEPT_TYPES else "api_error")
    return {"type": "error", "error": {"type": kind, "message": error.message}}


def event(name: str, data: Json) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class MessagesEvents:
    """One stream's chat events, written as Messages events (see the module's docstring)."""

    def __init__(self) -> None:
        self.started = False
        self.ended = False
        self.block: str | None = None  # the open content block's type
        self.index = -1  # and its index
        self.tools: dict[int, int] = {}  # chat tool call index → its tool_use block's index
        self.stop: str | None = None
        self.usage: Json = {}
        self.id = ""
        self.model = ""

    def write(self, data: bytes) -> bytes:
        """Whole events (each ended by a blank line), as they would have gone to a chat client."""
        out: list[bytes] = []
        for raw in data.split(b"\n\n"):
            if raw:
                self._event(raw, out)
        return b"".join(out)

    def _event(self, raw: bytes, out: list[bytes]) -> None:
        if raw.startswith(b":"):  # a heartbeat or the closing timing comment: clients skip comments
            if raw.startswith(CLOSING) and self.stop is not None and not self.ended:
                self._finish(out)  # the answer's end first: the timing comment closes the stream, as on chat
            out.append(raw + b"\n\n")
            return
        name = event_name(raw)
        if name is not None:  # already Anthropic's (a passed-through stream)
            self.started = True
            self.ended = self.ended or name in (b"message_stop", b"error")
            out.append(raw + b"\n\n")
            return
        payload = data_field(raw) or b""
        if payload.startswith(_DONE):
            if not self.ended:
                self._finish(out)
            return
        if self.ended:
            return
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        if not isinstance(chunk, dict):
            return
        if chunk.get("error") is not None:
            self._error(chunk["error"], out)
            return
        self.id = self.id or str(chunk.get("id") or "")
        self.model = self.model or str(chunk.get("model") or "")
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:  # Messages has no `n`
                self._start(out)
                self._delta(choice.get("delta") or {}, out)
                if choice.get("finish_reason"):
                    self.stop = stop_reason(choice["finish_reason"])

    def _start(self, out: list[bytes]) -> None:
        if self.started:
            return
        self.started = True
        out.append(event("message_start", {"type": "message_start", "message": {
            "id": message_id(self.id), "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}}))

    def _delta(self, delta: Json, out: list[bytes]) -> None:
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""}, out)
            out.append(self._block_delta({"type": "thinking_delta", "thinking": reasoning}))
        for field in ("content", "refusal"):
            text = delta.get(field)
            if isinstance(text, str) and text:
                self._open("text", {"type": "text", "text": ""}, out)
                out.append(self._block_delta({"type": "text_delta", "text": text}))
        for call in delta.get("tool_calls") or ():
            if isinstance(call, dict):
                self._tool_call(call, out)

    def _tool_call(self, call: Json, out: list[bytes]) -> None:
        number = call.get("index", 0)
        function = call.get("function") or {}
        if number not in self.tools:
            self._close_block(out)
            self.index += 1
            self.block = "tool_use"
            self.tools[number] = self.index
            out.append(event("content_block_start", {"type": "content_block_start", "index": self.index,
                                                     "content_block": {"type": "tool_use", "id": call.get("id") or "",
                                                                       "name": function.get("name") or "",
                                                                       "input": {}}}))
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            out.append(event("content_block_delta", {"type": "content_block_delta", "index": self.tools[number],
                                                     "delta": {"type": "input_json_delta",
                                                               "partial_json": arguments}}))

    def _open(self, kind: str, block: Json, out: list[bytes]) -> None:
        if self.block == kind:
            return
        self._close_block(out)
        self.index += 1
        self.block = kind
        out.append(event("content_block_start", {"type": "content_block_start", "index": self.index,
                                                 "content_block": block}))

    def _block_delta(self, delta: Json) -> bytes:
        return event("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta})

    def _close_block(self, out: list[bytes]) -> None:
        if self.block is not None:
            out.append(event("content_block_stop", {"type": "content_block_stop", "index": self.index}))
            self.block = None

    def _finish(self, out: list[bytes]) -> None:
        """The chat stream's end: the open block closes, then the stop reason and usage, then message_stop."""
        if self.stop is None:  # the gateway writes an error event before a [DONE] that ends nothing
            self._error({"message": "the stream ended without a stop reason", "type": "api_error"}, out)
            return
        self._start(out)
        self._close_block(out)
        counts = usage(self.usage)
        del counts["cache_creation_input_tokens"]  # a chat upstream's cache writes are not counted apart
        out.append(event("message_delta", {"type": "message_delta",
                                           "delta": {"stop_reason": self.stop, "stop_sequence": None},
                                           "usage": counts}))
        out.append(event("message_stop", {"type": "message_stop"}))
        self.ended = True

    def _error(self, error: Any, out: list[bytes]) -> None:
        """The stream failed: Anthropic's error event, and nothing after it."""
        self.ended = True
        details = error if isinstance(error, dict) else {"message": str(error)}
        kind = details.get("type")
        out.append(event("error", {"type": "error", "error": {
            "type": kind if isinstance(kind, str) and kind in _KEPT_TYPES else "api_error",
            "message": str(details.get("message") or "the upstream failed")}}))
