"""What the region's wire formats share: the request they parse into (Ask), the refusal of a bad one,
and the renderer each format supplies for one answer.

A renderer builds its bytes once per request from templates, so that a stream's per-token work is a
concatenation (the region must keep a thousand streams on schedule on one core).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from firsttoken.sim.lengths import Kind, kind_of
from firsttoken.sim.text import Answer, text_of
from firsttoken.sim.tools import Tool, ToolUse


class BadRequest(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.param, self.code = status, param, code


@dataclass(frozen=True)
class Ask:
    model: str
    prompt_tokens: int
    max_tokens: int
    stop: list[str]
    stream: bool
    include_usage: bool = False
    kind: Kind = Kind.CHAT  # what the request asks for, which sets how long its answer runs
    content: Any = None  # what makes it this request (not its max_tokens, not whether it streams)
    ignore_eos: bool = False  # run to max_tokens (vLLM's flag, as benchmark harnesses send it)
    message: str = ""  # the last user message's text
    tools: ToolUse | None = None  # the tools offered, and what is asked of them
    schema: dict[str, Any] | None = None  # the JSON schema the answer's text must satisfy (structured output)
    n: int = 1  # choices
    prompt_blocks: list[bytes] = field(default_factory=list)  # its cacheable prefix, as KV block hashes
    cache_prefix: int = 0  # tokens it asked to cache (Anthropic's cache_control); 0: cached without asking
    reasoning_effort: str | None = None  # asked for: none | low | medium | high (None: the model's default)
    thinking_budget: int | None = None  # Anthropic's extended thinking, when enabled: at most this many tokens
    store: bool = False  # keep the answer for a later request to continue (Responses' store)


@dataclass(frozen=True)
class PromptCache:
    """What the replica's prefix cache did for a request, as its usage reports it."""
    read: int = 0  # prompt tokens whose prefill was skipped
    written: int = 0  # tokens asked to be cached that were computed and kept (Anthropic's cache creation)


class Renderer(Protocol):
    prompt_cache: PromptCache  # set once the request is admitted, before anything is rendered

    def whole(self) -> bytes:
        """The non-streaming response body."""

    def opening(self) -> bytes:
        """The stream's first bytes, up to and including the first token."""

    def piece(self, index: int) -> bytes:
        """The event carrying token `index` (from 1)."""

    def closing(self, decode_ms: float) -> bytes:
        """The stream's last events, with the ground-truth comment."""


class WireFormat(Protocol):
    call_prefix: str  # of the ids of the tool calls it answers with
    reasons_by_default: bool  # a reasoning model thinks unless told not to (OpenAI) or only when asked (Anthropic)

    def parse(self, body: Any, models: list[str]) -> Ask: ...

    def renderer(self, ask: Ask, answers: list[Answer]) -> Renderer:
        """The renderer of the request's answers (one per choice; formats without `n` have one)."""

    def error_body(self, status: int, message: str, param: str | None, code: str | None,
                   kind: str | None = None) -> bytes:
        """An error in this format; `kind` refines OpenAI's type (a rate limit's "requests" or "tokens")."""


def stop_list(value: Any, param: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return [s for s in value if s]
    raise BadRequest(400, f"'{param}' must be a string or a list of strings.", param)


def positive_int(value: Any, param: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(400, f"'{param}' must be a positive integer, got {value!r}.", param)
    return value


def conversation(body: Any, models: list[str], no_messages: str) -> tuple[dict[str, Any], list[Any], str]:
    """What both formats require: a JSON object with non-empty `messages` and a model this region serves.
    `no_messages` is the format's own wording of the error."""
    if not isinstance(body, dict):
        raise BadRequest(400, "The request body must be a JSON object.")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest(400, no_messages, "messages")
    return body, messages, served_model(body.get("model"), models)


def identity(body: dict[str, Any], messages: list[Any], system: str) -> tuple[Kind, Any, str]:
    """The request's kind, from its instructions (the system prompt and the last user message), the
    content its answer depends on, and the last user message's text."""
    last_user = text_of(next((m.get("content") for m in reversed(messages)
                              if isinstance(m, dict) and m.get("role") == "user"), ""))
    kind = kind_of(f"{system}\n{last_user}")
    content = {key: body.get(key) for key in ("model", "messages", "system", "tools", "tool_choice",
                                              "response_format", "seed")}
    return kind, content, last_user


def tool_list(value: Any, definition: Callable[[dict[str, Any]], tuple[Any, Any, Any] | None],
              shape: str) -> list[Tool]:
    """A request's `tools`, each entry read by the format's `definition` into (name, description, schema),
    or None for a tool the region does not call (a provider's own server tools)."""
    if not isinstance(value, list):
        raise BadRequest(400, f"'tools' must be a list of {shape}.", "tools")
    tools = []
    for index, entry in enumerate(value):
        found = definition(entry) if isinstance(entry, dict) else ("", "", None)
        if found is None:
            continue
        name, description, schema = found
        if not isinstance(name, str) or not name or not isinstance(schema, dict):
            raise BadRequest(400, f"tools[{index}]: expected {shape}, with a name and a JSON schema object.",
                             f"tools[{index}]")
        tools.append(Tool(name, str(description or ""), schema))
    return tools


NO_PARAMETERS = {"type": "object", "properties": {}}


def served_model(value: Any, models: list[str]) -> str:
    if value not in models:
        raise BadRequest(404, f"The model {value!r} does not exist in this region; it serves "
                              f"{', '.join(models)}.", "model", "model_not_found")
    return value


def sim_timing(decode_ms: float) -> bytes:
    return f": sim-timing decode;dur={decode_ms:.2f}\n\n".encode()
