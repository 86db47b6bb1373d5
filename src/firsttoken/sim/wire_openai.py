"""OpenAI chat completions, as the region speaks them."""

from __future__ import annotations

import base64
import itertools
import time
from array import array
from dataclasses import dataclass
from typing import Any

import orjson

from firsttoken.sim import text
from firsttoken.sim.catalogue import Model
from firsttoken.sim.prefix_cache import block_hashes
from firsttoken.sim.text import Answer, split_by_call
from firsttoken.sim.tools import ToolUse
from firsttoken.sim.wire import (
    NO_PARAMETERS,
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


EFFORTS = {"none": "none", "minimal": "low", "low": "low", "medium": "medium", "high": "high"}


def effort(value: Any) -> str | None:
    if value is None:
        return None
    if value not in EFFORTS:
        raise BadRequest(400, f"'reasoning_effort' must be one of {', '.join(EFFORTS)}, got {value!r}.",
                         "reasoning_effort")
    return EFFORTS[value]


MAX_CHOICES = 128  # as OpenAI's API bounds `n`


def choices(value: Any) -> int:
    if value is None:
        return 1
    n = positive_int(value, "n")
    if n > MAX_CHOICES:
        raise BadRequest(400, f"'n' must be at most {MAX_CHOICES}, got {n}.", "n")
    return n


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
        tokens = text.prompt_token_list(messages)
        return Ask(model, max(len(tokens), 1), max_tokens, stop_list(body.get("stop"), "stop"),
                   bool(body.get("stream")), include_usage, kind, content, body.get("ignore_eos") is True,
                   message, tool_use(body, messages), answer_schema(body.get("response_format")),
                   choices(body.get("n")), block_hashes(tokens), 0, effort(body.get("reasoning_effort")))

    call_prefix = "call_sim"
    reasons_by_default = True

    def renderer(self, ask: Ask, answers: list[Answer]) -> Renderer:
        renderers: list[OpenAIRenderer] = []
        for choice, answer in enumerate(answers):
            kind = OpenAIToolRenderer if answer.calls else OpenAIRenderer
            renderers.append(kind(ask, answer, choice, renderers[0].base if renderers else None))
        return renderers[0] if len(renderers) == 1 else OpenAIChoices(ask, renderers)

    def error_body(self, status: int, message: str, param: str | None, code: str | None,
                   kind: str | None = None) -> bytes:
        kind = kind or {429: "requests", 503: "server_error"}.get(status, "invalid_request_error")
        return orjson.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})


class OpenAIRenderer:
    """One choice's answer (the request's only one, or choice `choice` of its `n`)."""

    prompt_cache = PromptCache()

    def __init__(self, ask: Ask, answer: Answer, choice: int = 0, base: dict[str, Any] | None = None) -> None:
        self.ask, self.answer, self.choice = ask, answer, choice
        self.base = base or {"id": f"chatcmpl-sim{next(_ids)}", "object": "chat.completion.chunk",
                             "created": int(time.time()), "model": ask.model}
        # Every content chunk is this prefix, the JSON string of the piece, and this suffix.
        head = orjson.dumps({**self.base, "choices": [{"index": choice, "delta": {"content": ""},
                                                       "finish_reason": None}]})
        self._prefix, self._suffix = head.split(b'""', 1)
        self._prefix = b"data: " + self._prefix
        # Thinking streams first, as `reasoning_content` (as vLLM's reasoning parsers and DeepSeek send it).
        self._thinking = len(answer.reasoning)
        head = head.replace(b'"content"', b'"reasoning_content"', 1)
        self._reasoning_prefix, self._reasoning_suffix = head.split(b'""', 1)
        self._reasoning_prefix = b"data: " + self._reasoning_prefix

    @property
    def usage(self) -> dict[str, Any]:
        return usage(self.ask, [self.answer], self.prompt_cache)

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        payload = {**self.base, "choices": [{"index": self.choice, "delta": delta, "finish_reason": finish}]}
        return b"data: " + orjson.dumps(payload) + b"\n\n"

    def message(self) -> dict[str, Any]:
        message = {"role": "assistant", "content": "".join(self.answer.pieces)}
        if self.answer.reasoning:
            message["reasoning_content"] = "".join(self.answer.reasoning)
        return message

    def whole_choice(self) -> dict[str, Any]:
        return {"index": self.choice, "message": self.message(), "finish_reason": _FINISH[self.answer.finish]}

    def whole(self) -> bytes:
        return orjson.dumps({**self.base, "object": "chat.completion", "choices": [self.whole_choice()],
                             "usage": self.usage})

    def opening(self) -> bytes:
        first = self.piece(0) if self.answer.steps else b""
        return self._chunk({"role": "assistant", "content": ""}) + first

    def piece(self, index: int) -> bytes:
        if index < self._thinking:
            return (self._reasoning_prefix + orjson.dumps(self.answer.reasoning[index]) + self._reasoning_suffix
                    + b"\n\n")
        return self._prefix + orjson.dumps(self.answer.pieces[index - self._thinking]) + self._suffix + b"\n\n"

    def finish(self) -> bytes:
        return self._chunk({}, _FINISH[self.answer.finish])

    def closing(self, decode_ms: float) -> bytes:
        return self.finish() + end_of_stream(self.ask, self.base, self.usage, decode_ms)


def usage(ask: Ask, answers: list[Answer], cache: PromptCache) -> dict[str, Any]:
    completion = sum(answer.steps for answer in answers)
    return {"prompt_tokens": ask.prompt_tokens, "completion_tokens": completion,
            "total_tokens": ask.prompt_tokens + completion, "prompt_tokens_details": {"cached_tokens": cache.read},
            "completion_tokens_details": {"reasoning_tokens": sum(len(answer.reasoning) for answer in answers)}}


def end_of_stream(ask: Ask, base: dict[str, Any], counts: dict[str, Any], decode_ms: float) -> bytes:
    """After the finish chunks: the usage chunk when asked for, the ground truth, [DONE]."""
    tail = b"data: " + orjson.dumps({**base, "choices": [], "usage": counts}) + b"\n\n" if ask.include_usage else b""
    return tail + sim_timing(decode_ms) + b"data: [DONE]\n\n"


class OpenAIChoices:
    """`n` choices: each engine step carries a token of every choice still running (they are decoded
    together, in one batch, after one prefill of the shared prompt), each ends with its own finish."""

    prompt_cache = PromptCache()

    def __init__(self, ask: Ask, renderers: list[OpenAIRenderer]) -> None:
        self.ask, self.renderers = ask, renderers

    def whole(self) -> bytes:
        base = self.renderers[0].base
        return orjson.dumps({**base, "object": "chat.completion", "choices": [r.whole_choice() for r in self.renderers],
                             "usage": usage(self.ask, [r.answer for r in self.renderers], self.prompt_cache)})

    def opening(self) -> bytes:
        return b"".join(r.opening() for r in self.renderers)

    def piece(self, index: int) -> bytes:
        return b"".join(r.piece(index) for r in self.renderers if index < r.answer.steps)

    def closing(self, decode_ms: float) -> bytes:
        counts = usage(self.ask, [r.answer for r in self.renderers], self.prompt_cache)
        return b"".join(r.finish() for r in self.renderers) + end_of_stream(
            self.ask, self.renderers[0].base, counts, decode_ms)


class OpenAIToolRenderer(OpenAIRenderer):
    """An answer that calls tools: a `tool_calls` delta per token (the call's id and name with its first),
    its finish `tool_calls`."""

    def __init__(self, ask: Ask, answer: Answer, choice: int = 0, base: dict[str, Any] | None = None) -> None:
        super().__init__(ask, answer, choice, base)
        self._events = []
        for index, (call, pieces) in enumerate(split_by_call(answer)):
            for number, piece in enumerate(pieces):
                delta: dict[str, Any] = {"index": index, "function": {"arguments": piece}}
                if number == 0:
                    delta = {"index": index, "id": call.id, "type": "function",
                             "function": {"name": call.name, "arguments": piece}}
                self._events.append(self._chunk({"tool_calls": [delta]}))

    def message(self) -> dict[str, Any]:
        calls = [{"id": call.id, "type": "function", "function": {"name": call.name, "arguments": "".join(pieces)}}
                 for call, pieces in split_by_call(self.answer)]
        return {"role": "assistant", "content": None, "tool_calls": calls}

    def opening(self) -> bytes:
        return self._chunk({"role": "assistant", "content": None}) + self.piece(0)

    def piece(self, index: int) -> bytes:
        return self._events[index]


@dataclass(frozen=True)
class EmbeddingAsk:
    model: str
    texts: list[str]
    tokens: int  # the inputs' tokens together: what the encoder's forward pass reads
    width: int  # of the encoder's vectors
    dims: int  # of the vectors answered (a Matryoshka-style prefix when smaller)
    base64: bool


def parse_embeddings(body: Any, encoders: dict[str, Model]) -> EmbeddingAsk:
    """POST /v1/embeddings: `encoders` are the embedding models the region serves, by name."""
    if not isinstance(body, dict):
        raise BadRequest(400, "The request body must be a JSON object.")
    model = body.get("model")
    if model not in encoders:
        raise BadRequest(404 if not encoders else 400, f"The model {model!r} is not an embedding model of this "
                         f"region; it serves {', '.join(encoders) or 'none'} for embeddings.", "model",
                         "model_not_found")
    value = body.get("input")
    if isinstance(value, str) or (isinstance(value, list) and value and all(isinstance(v, int) for v in value)):
        value = [value]  # one string, or one list of token ids
    if not isinstance(value, list) or not value or not all(_one_input(v) for v in value):
        raise BadRequest(400, "'input' must be a non-empty string, a list of them, or token ids (a list of "
                              "integers, or a list of such lists).", "input")
    encoder = encoders[model]
    texts = [v if isinstance(v, str) else " ".join(map(str, v)) for v in value]
    counts = [text.count_tokens(v) if isinstance(v, str) else len(v) for v in value]
    if max(counts) > encoder.max_context:
        raise BadRequest(400, f"An input of {max(counts)} tokens is longer than {model} reads "
                              f"({encoder.max_context}).", "input", "context_length_exceeded")
    width = encoder.embedding_dims
    dims = width if body.get("dimensions") is None else positive_int(body["dimensions"], "dimensions")
    if dims > width:
        raise BadRequest(400, f"'dimensions' is at most {width} for {model}.", "dimensions")
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise BadRequest(400, "'encoding_format' must be 'float' or 'base64'.", "encoding_format")
    return EmbeddingAsk(model, texts, sum(counts), width, dims, encoding == "base64")


def _one_input(value: Any) -> bool:
    if isinstance(value, str):
        return bool(value)
    return isinstance(value, list) and bool(value) and all(isinstance(v, int) and not isinstance(v, bool)
                                                           for v in value)


def embeddings_body(ask: EmbeddingAsk, vectors: list[list[float]]) -> bytes:
    data = [{"object": "embedding", "index": i,
             "embedding": base64.b64encode(array("f", v).tobytes()).decode() if ask.base64 else v}
            for i, v in enumerate(vectors)]
    return orjson.dumps({"object": "list", "data": data, "model": ask.model,
                         "usage": {"prompt_tokens": ask.tokens, "total_tokens": ask.tokens}})
