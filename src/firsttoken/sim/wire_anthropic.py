"""Anthropic's Messages API, as the region speaks it: the same engine behind Claude's wire format."""

from __future__ import annotations

import itertools
from typing import Any

import orjson

from firsttoken.sim import text
from firsttoken.sim.text import Answer
from firsttoken.sim.wire import Ask, BadRequest, conversation, identity, positive_int, sim_timing, stop_list

_ids = itertools.count(1)
_STOP_REASON = {"length": "max_tokens", "stop": "end_turn"}
# Anthropic's error types by status (docs.anthropic.com, "Errors"); 529 is its overload status.
_ERROR_TYPE = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
               413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error",
               529: "overloaded_error"}


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _system_text(system: Any) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    if isinstance(system, list):
        return " ".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    raise BadRequest(400, "system: expected a string or a list of text blocks.", "system")


class AnthropicMessages:
    overload_status = 529

    def parse(self, body: Any, models: list[str]) -> Ask:
        body, messages, model = conversation(body, models, "messages: Field required (a non-empty list).")
        if "max_tokens" not in body:
            raise BadRequest(400, "max_tokens: Field required.", "max_tokens")
        max_tokens = positive_int(body["max_tokens"], "max_tokens")
        system = _system_text(body.get("system"))
        prompt = text.prompt_tokens(messages) + (4 + text.count_tokens(system) if system else 0)
        kind, content = identity(body, messages, system)
        return Ask(model, prompt, max_tokens, stop_list(body.get("stop_sequences"), "stop_sequences"),
                   bool(body.get("stream")), False, kind, content, body.get("ignore_eos") is True)

    def renderer(self, ask: Ask, answer: Answer) -> AnthropicRenderer:
        return AnthropicRenderer(ask, answer)

    def error_body(self, status: int, message: str, param: str | None, code: str | None,
                   kind: str | None = None) -> bytes:
        kind = _ERROR_TYPE.get(status, "api_error")  # Anthropic's types go by status alone
        return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})


class AnthropicRenderer:
    def __init__(self, ask: Ask, answer: Answer) -> None:
        self.ask, self.answer = ask, answer
        self.id = f"msg_sim{next(_ids):012d}"
        head = _event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                              "delta": {"type": "text_delta", "text": ""}})
        self._prefix, self._suffix = head.split(b'""', 1)

    @property
    def stop_reason(self) -> str:
        return "stop_sequence" if self.answer.stop_sequence is not None else _STOP_REASON[self.answer.finish]

    def _message(self, content: list[dict[str, Any]], stop_reason: str | None, output_tokens: int) -> dict[str, Any]:
        stop_sequence = self.answer.stop_sequence if stop_reason else None
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.ask.model, "content": content,
                "stop_reason": stop_reason, "stop_sequence": stop_sequence,
                "usage": {"input_tokens": self.ask.prompt_tokens, "output_tokens": output_tokens}}

    def whole(self) -> bytes:
        content = [{"type": "text", "text": "".join(self.answer.pieces)}]
        return orjson.dumps(self._message(content, self.stop_reason, len(self.answer.pieces)))

    def opening(self) -> bytes:
        start = _event("message_start", {"type": "message_start", "message": self._message([], None, 1)})
        block = _event("content_block_start", {"type": "content_block_start", "index": 0,
                                               "content_block": {"type": "text", "text": ""}})
        first = self.piece(0) if self.answer.pieces else b""
        return start + block + _event("ping", {"type": "ping"}) + first

    def piece(self, index: int) -> bytes:
        return self._prefix + orjson.dumps(self.answer.pieces[index]) + self._suffix

    def closing(self, decode_ms: float) -> bytes:
        stop = _event("content_block_stop", {"type": "content_block_stop", "index": 0})
        delta = _event("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": self.stop_reason, "stop_sequence": self.answer.stop_sequence},
            "usage": {"output_tokens": len(self.answer.pieces)}})
        return stop + delta + sim_timing(decode_ms) + _event("message_stop", {"type": "message_stop"})
