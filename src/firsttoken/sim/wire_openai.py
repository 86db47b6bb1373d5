"""OpenAI chat completions, as the region speaks them."""

from __future__ import annotations

import itertools
import time
from typing import Any

import orjson

from firsttoken.sim import text
from firsttoken.sim.text import Answer
from firsttoken.sim.wire import Ask, conversation, identity, positive_int, sim_timing, stop_list

DEFAULT_MAX_TOKENS = 128
_ids = itertools.count(1)

_FINISH = {"length": "length", "stop": "stop"}


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
        kind, content = identity(body, messages, system)
        return Ask(model, text.prompt_tokens(messages), max_tokens, stop_list(body.get("stop"), "stop"),
                   bool(body.get("stream")), include_usage, kind, content, body.get("ignore_eos") is True)

    def renderer(self, ask: Ask, answer: Answer) -> OpenAIRenderer:
        return OpenAIRenderer(ask, answer)

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
