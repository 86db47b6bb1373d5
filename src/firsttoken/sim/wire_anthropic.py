"""Anthropic's Messages API, as the region speaks it: the same engine behind Claude's wire format."""

from __future__ import annotations

import base64
import hashlib
import itertools
from typing import Any

import orjson

from firsttoken.sim import text
from firsttoken.sim.prefix_cache import block_hashes
from firsttoken.sim.text import Answer, split_by_call
from firsttoken.sim.tools import ToolUse
from firsttoken.sim.wire import (
    Ask,
    BadRequest,
    PromptCache,
    Renderer,
    conversation,
    identity,
    positive_int,
    sim_timing,
    stop_list,
    tool_list,
)

_ids = itertools.count(1)
_STOP_REASON = {"length": "max_tokens", "stop": "end_turn", "tool_calls": "tool_use"}
_TOOL_SHAPE = "{'name': ..., 'input_schema': {...}}"
MIN_CACHED_TOKENS = 1024  # shorter prefixes are not cached, whatever cache_control says (Claude Sonnet, Opus)
_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
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


def _definition(entry: dict[str, Any]) -> tuple[Any, Any, Any] | None:
    if entry.get("type") not in (None, "custom"):  # Anthropic's own tools (web search, bash, …) run there
        return None
    return entry.get("name"), entry.get("description"), entry.get("input_schema")


def tool_use(body: dict[str, Any], messages: list[Any]) -> ToolUse | None:
    """The request's tools and tool_choice; None when it offers none."""
    if body.get("tools") in (None, []):
        return None
    tools = tool_list(body["tools"], _definition, _TOOL_SHAPE)
    choice = body.get("tool_choice", {"type": "auto"})
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool":
        name = choice.get("name")
        if name not in {tool.name for tool in tools}:
            raise BadRequest(400, "tool_choice.name: not one of the tools.", "tool_choice")
    elif kind in _CHOICES:
        name = _CHOICES[kind]
    else:
        raise BadRequest(400, "tool_choice.type: expected 'auto', 'any', 'tool' or 'none'.", "tool_choice")
    last = messages[-1] if messages else {}
    content = last.get("content") if isinstance(last, dict) else None
    after_results = isinstance(content, list) and bool(content) and all(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content)
    return ToolUse(tools, name, not (isinstance(choice, dict) and choice.get("disable_parallel_tool_use")),
                   after_results)


MIN_THINKING_BUDGET = 1024  # Anthropic's floor for budget_tokens


def thinking_budget(value: Any, max_tokens: int) -> int | None:
    """Extended thinking's budget when `thinking` enables it; None when it is absent or disabled."""
    if value is None or (isinstance(value, dict) and value.get("type") == "disabled"):
        return None
    budget = value.get("budget_tokens") if isinstance(value, dict) and value.get("type") == "enabled" else None
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise BadRequest(400, "thinking: expected {'type': 'enabled', 'budget_tokens': N} or {'type': 'disabled'}.",
                         "thinking")
    if budget < MIN_THINKING_BUDGET:
        raise BadRequest(400, f"thinking.budget_tokens: Input should be greater than or equal to "
                              f"{MIN_THINKING_BUDGET}.", "thinking")
    if budget >= max_tokens:
        raise BadRequest(400, "`max_tokens` must be greater than `thinking.budget_tokens`.", "thinking")
    return budget


def cache_breakpoint(system: Any, messages: list[Any], tokens: list[str]) -> int:
    """The tokens of the prompt's prefix that `cache_control` asks to cache: through the end of the last
    turn (the system prompt, or a message) with a marked block; 0 when none is marked or when that prefix
    is shorter than Anthropic caches (MIN_CACHED_TOKENS)."""
    turns = ([system] if system else []) + [m.get("content") if isinstance(m, dict) else None for m in messages]
    end, through = 0, 0
    for turn in turns:
        if turn is None:
            continue
        end += 4 + len(text.words(text.text_of(turn)))
        if isinstance(turn, list) and any(isinstance(b, dict) and b.get("cache_control") for b in turn):
            through = end
    return through if through >= MIN_CACHED_TOKENS else 0


class AnthropicMessages:
    overload_status = 529

    def parse(self, body: Any, models: list[str]) -> Ask:
        body, messages, model = conversation(body, models, "messages: Field required (a non-empty list).")
        if "max_tokens" not in body:
            raise BadRequest(400, "max_tokens: Field required.", "max_tokens")
        max_tokens = positive_int(body["max_tokens"], "max_tokens")
        system = _system_text(body.get("system"))
        tokens = text.prompt_token_list(messages, system)
        kind, content, message = identity(body, messages, system)
        cached = cache_breakpoint(body.get("system"), messages, tokens)
        return Ask(model, max(len(tokens), 1), max_tokens, stop_list(body.get("stop_sequences"), "stop_sequences"),
                   bool(body.get("stream")), False, kind, content, body.get("ignore_eos") is True,
                   message, tool_use(body, messages), None, 1, block_hashes(tokens[:cached], partial=True), cached,
                   None, thinking_budget(body.get("thinking"), max_tokens))

    call_prefix = "toolu_sim"
    reasons_by_default = False

    def renderer(self, ask: Ask, answers: list[Answer]) -> Renderer:
        [answer] = answers  # Messages has no `n`
        return AnthropicToolRenderer(ask, answer) if answer.calls else AnthropicRenderer(ask, answer)

    def error_body(self, status: int, message: str, param: str | None, code: str | None,
                   kind: str | None = None) -> bytes:
        kind = _ERROR_TYPE.get(status, "api_error")  # Anthropic's types go by status alone
        return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})


class AnthropicRenderer:
    prompt_cache = PromptCache()

    def __init__(self, ask: Ask, answer: Answer) -> None:
        self.ask, self.answer = ask, answer
        self.id = f"msg_sim{next(_ids):012d}"
        # With extended thinking, block 0 is the thinking and the text is block 1.
        self._thinking = len(answer.reasoning)
        self._text_block = 1 if self._thinking else 0
        head = _event("content_block_delta", {"type": "content_block_delta", "index": self._text_block,
                                              "delta": {"type": "text_delta", "text": ""}})
        self._prefix, self._suffix = head.split(b'""', 1)
        thinking = _event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                  "delta": {"type": "thinking_delta", "thinking": ""}})
        self._thinking_prefix, self._thinking_suffix = thinking.split(b'""', 1)
        # The thinking's signature: opaque to the client, the same for the same thinking.
        self.signature = base64.b64encode(hashlib.blake2b("".join(answer.reasoning).encode(),
                                                          digest_size=48).digest()).decode()

    @property
    def stop_reason(self) -> str:
        return "stop_sequence" if self.answer.stop_sequence is not None else _STOP_REASON[self.answer.finish]

    def _message(self, content: list[dict[str, Any]], stop_reason: str | None, output_tokens: int) -> dict[str, Any]:
        stop_sequence = self.answer.stop_sequence if stop_reason else None
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.ask.model, "content": content,
                "stop_reason": stop_reason, "stop_sequence": stop_sequence,
                "usage": {"input_tokens": self.ask.prompt_tokens - self.prompt_cache.read - self.prompt_cache.written,
                          "output_tokens": output_tokens, "cache_read_input_tokens": self.prompt_cache.read,
                          "cache_creation_input_tokens": self.prompt_cache.written}}

    def whole(self) -> bytes:
        content = [{"type": "text", "text": "".join(self.answer.pieces)}]
        if self._thinking:
            content.insert(0, {"type": "thinking", "thinking": "".join(self.answer.reasoning),
                               "signature": self.signature})
        return orjson.dumps(self._message(content, self.stop_reason, self.answer.steps))

    def opening(self) -> bytes:
        start = _event("message_start", {"type": "message_start", "message": self._message([], None, 1)})
        first_block = {"type": "thinking", "thinking": ""} if self._thinking else {"type": "text", "text": ""}
        block = _event("content_block_start", {"type": "content_block_start", "index": 0,
                                               "content_block": first_block})
        first = self.piece(0) if self.answer.steps else b""
        return start + block + _event("ping", {"type": "ping"}) + first

    def piece(self, index: int) -> bytes:
        if index < self._thinking:
            return self._thinking_prefix + orjson.dumps(self.answer.reasoning[index]) + self._thinking_suffix
        text = self._prefix + orjson.dumps(self.answer.pieces[index - self._thinking]) + self._suffix
        return self._end_of_thinking() + text if index == self._thinking and self._thinking else text

    def _end_of_thinking(self) -> bytes:
        """The thinking block's signature and end, and the text block's start."""
        return (_event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "signature_delta", "signature": self.signature}})
                + _event("content_block_stop", {"type": "content_block_stop", "index": 0})
                + _event("content_block_start", {"type": "content_block_start", "index": 1,
                                                 "content_block": {"type": "text", "text": ""}}))

    def closing(self, decode_ms: float) -> bytes:
        # max_tokens may have cut the thinking short: its end and an empty text block come now
        unended = self._end_of_thinking() if self._thinking and not self.answer.pieces else b""
        stop = _event("content_block_stop", {"type": "content_block_stop", "index": self._text_block})
        delta = _event("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": self.stop_reason, "stop_sequence": self.answer.stop_sequence},
            "usage": {"output_tokens": self.answer.steps}})
        return unended + stop + delta + sim_timing(decode_ms) + _event("message_stop", {"type": "message_stop"})


class AnthropicToolRenderer(AnthropicRenderer):
    """An answer that calls tools: a `tool_use` block per call, its input streamed as `input_json_delta`s
    (one per token), its stop reason `tool_use`."""

    def __init__(self, ask: Ask, answer: Answer) -> None:
        super().__init__(ask, answer)
        self._events: list[bytes] = []
        for index, (call, pieces) in enumerate(split_by_call(answer)):
            for number, piece in enumerate(pieces):
                event = b""
                if number == 0:
                    if index > 0:
                        event += _event("content_block_stop", {"type": "content_block_stop", "index": index - 1})
                    event += _event("content_block_start", {"type": "content_block_start", "index": index,
                                                            "content_block": {"type": "tool_use", "id": call.id,
                                                                              "name": call.name, "input": {}}})
                self._events.append(event + _event("content_block_delta", {
                    "type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece}}))
        self._blocks = len(split_by_call(answer))

    def whole(self) -> bytes:
        content = [{"type": "tool_use", "id": call.id, "name": call.name, "input": orjson.loads(call.arguments)}
                   for call, pieces in split_by_call(self.answer) if len(pieces) == len(call.pieces)]
        return orjson.dumps(self._message(content, self.stop_reason, self.answer.steps))

    def opening(self) -> bytes:
        start = _event("message_start", {"type": "message_start", "message": self._message([], None, 1)})
        return start + _event("ping", {"type": "ping"}) + self.piece(0)

    def piece(self, index: int) -> bytes:
        return self._events[index]

    def closing(self, decode_ms: float) -> bytes:
        delta = _event("message_delta", {"type": "message_delta",
                                         "delta": {"stop_reason": self.stop_reason, "stop_sequence": None},
                                         "usage": {"output_tokens": self.answer.steps}})
        stop = _event("content_block_stop", {"type": "content_block_stop", "index": self._blocks - 1})
        return stop + delta + sim_timing(decode_ms) + _event("message_stop", {"type": "message_stop"})
