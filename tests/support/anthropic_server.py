"""A test upstream speaking Anthropic's Messages API, streamed and not, in the shapes api.anthropic.com sends.

It checks requests about as strictly as the real API (required headers and fields, unknown fields,
alternating roles, tool results answering the tool calls just made) and records each one, so a test
can assert what an adapter sent. It answers by calling the first tool when tools are offered
(and the last turn is not a tool result), and otherwise with "You said: <last user text>"; a thinking
block comes first when thinking is enabled. One word is one token, so max_tokens and stop_sequences
cut the answer the way the real API does.

    async with run_anthropic_server() as upstream:
        upstream.url        # http://127.0.0.1:PORT/v1, as an `Upstream.url`
        upstream.base_url   # http://127.0.0.1:PORT, for anthropic.AsyncAnthropic(base_url=...)
        upstream.last.body  # the last request's JSON body
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from aiohttp import web

Json = dict[str, Any]

MODELS = ("claude-test-1", "claude-test-2")
KNOWN_FIELDS = frozenset({"model", "messages", "max_tokens", "system", "metadata", "stop_sequences", "stream",
                          "temperature", "top_p", "top_k", "tools", "tool_choice", "thinking", "service_tier",
                          "container", "mcp_servers", "cache_control", "diagnostics", "inference_geo",
                          "output_config", "speed"})


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Json


class AnthropicTestServer:
    """The state of one test upstream: what it was sent, and knobs a test may turn before a request."""

    def __init__(self, api_key: str = "test-key", line_ending: str = "\n") -> None:
        self.api_key = api_key
        self.line_ending = line_ending  # "\r\n" to check that readers take either
        self.fault: Literal["error", "cut"] | None = None  # an `error` event, or a stream cut, after one delta
        self.input_tokens = 25
        self.cache_creation_input_tokens = 0
        self.cache_read_input_tokens = 0
        self.received: list[Received] = []
        self.url = self.base_url = ""
        self.app = web.Application()
        self.app.router.add_post("/v1/messages", self._messages)
        self.app.router.add_get("/v1/models", self._models)

    @property
    def last(self) -> Received:
        return self.received[-1]

    # --- handlers ---

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        if refusal := self._check_headers(request):
            return refusal
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return error_response(400, "invalid_request_error", "request body is not valid JSON")
        if not isinstance(body, dict):
            return error_response(400, "invalid_request_error", "request body must be an object")
        self.received.append(Received(request.path, dict(request.headers), body))
        if problem := check_request(body):
            return error_response(400, "invalid_request_error", problem)
        blocks, stop_reason, stop_sequence, output_tokens = answer(body)
        message = {"id": f"msg_test{len(self.received):04d}", "type": "message", "role": "assistant",
                   "model": body["model"], "content": blocks, "stop_reason": stop_reason,
                   "stop_sequence": stop_sequence, "usage": self._usage(output_tokens)}
        if body.get("stream"):
            return await self._stream(request, message)
        return web.Response(body=orjson.dumps(message), content_type="application/json")

    async def _models(self, request: web.Request) -> web.Response:
        if refusal := self._check_headers(request):
            return refusal
        data = [{"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"} for m in MODELS]
        page = {"data": data, "has_more": False, "first_id": MODELS[0], "last_id": MODELS[-1]}
        return web.Response(body=orjson.dumps(page), content_type="application/json")

    def _check_headers(self, request: web.Request) -> web.Response | None:
        # API keys come as x-api-key, or (newer SDKs) as a bearer token
        bearer = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if self.api_key not in (request.headers.get("x-api-key"), bearer):
            return error_response(401, "authentication_error", "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return error_response(400, "invalid_request_error", "anthropic-version: header is required")
        return None

    def _usage(self, output_tokens: int) -> Json:
        return {"input_tokens": self.input_tokens, "cache_creation_input_tokens": self.cache_creation_input_tokens,
                "cache_read_input_tokens": self.cache_read_input_tokens, "output_tokens": output_tokens}

    # --- streaming ---

    async def _stream(self, request: web.Request, message: Json) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        for name, data in self._events(message):
            await response.write(self._event(name, data))
            await asyncio.sleep(0)  # one write per event, as the real API flushes them
            if name == "content_block_delta" and self.fault == "cut":
                return response  # the connection ends with no message_stop
            if name == "content_block_delta" and self.fault == "error":
                error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
                await response.write(self._event("error", error))
                return response
        await response.write_eof()
        return response

    def _event(self, name: str, data: Json) -> bytes:
        end = self.line_ending
        return f"event: {name}{end}data: ".encode() + orjson.dumps(data) + f"{end}{end}".encode()

    def _events(self, message: Json) -> list[tuple[str, Json]]:
        start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
                 "usage": {**message["usage"], "output_tokens": 1}}
        events: list[tuple[str, Json]] = [("message_start", {"type": "message_start", "message": start})]
        for index, block in enumerate(message["content"]):
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": _empty(block)}))
            if index == 0:
                events.append(("ping", {"type": "ping"}))
            events += [("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
                       for delta in _deltas(block)]
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        events.append(("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
            "usage": {"output_tokens": message["usage"]["output_tokens"]}}))
        events.append(("message_stop", {"type": "message_stop"}))
        return events


def _empty(block: Json) -> Json:
    """A block as content_block_start announces it, before its deltas fill it in."""
    if block["type"] == "text":
        return {"type": "text", "text": ""}
    if block["type"] == "thinking":
        return {"type": "thinking", "thinking": "", "signature": ""}
    return {**block, "input": {}}


def _deltas(block: Json) -> list[Json]:
    if block["type"] == "text":
        return [{"type": "text_delta", "text": piece} for piece in words(block["text"])]
    if block["type"] == "thinking":
        return ([{"type": "thinking_delta", "thinking": piece} for piece in words(block["thinking"])]
                + [{"type": "signature_delta", "signature": block["signature"]}])
    arguments = orjson.dumps(block["input"]).decode()
    third = max(1, len(arguments) // 3)  # the real API opens with an empty partial, then splits anywhere
    pieces = [""] + [arguments[i:i + third] for i in range(0, len(arguments), third)]
    return [{"type": "input_json_delta", "partial_json": piece} for piece in pieces]


# --- what the upstream checks and answers ---

def check_request(body: Json) -> str | None:
    """The first thing the real API would reject in this body, worded like it, or None."""
    for field in body:
        if field not in KNOWN_FIELDS:
            return f"{field}: Extra inputs are not permitted"
    if not isinstance(body.get("model"), str):
        return "model: Field required"
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: Field required"
    thinking = body.get("thinking") or {}
    if thinking.get("type") == "enabled":
        if thinking.get("budget_tokens", 0) < 1024:
            return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
        if body["max_tokens"] <= thinking["budget_tokens"]:
            return "`max_tokens` must be greater than `thinking.budget_tokens`"
    if not isinstance(body.get("system", ""), (str, list)):
        return "system: Input should be a valid string or list"
    previous: Json | None = None
    for i, message in enumerate(messages):
        if message.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        if previous is not None and previous["role"] == message["role"]:
            return f"messages.{i}: roles must alternate between user and assistant"  # stricter than the real API
        if problem := _check_content(message, previous, i):
            return problem
        previous = message
    return None


def _check_content(message: Json, previous: Json | None, i: int) -> str | None:
    content = message.get("content")
    if isinstance(content, str):
        return None if content else f"messages.{i}: all messages must have non-empty content"
    if not isinstance(content, list) or not content:
        return f"messages.{i}: all messages must have non-empty content"
    called = {b["id"] for b in _blocks(previous) if b.get("type") == "tool_use"}
    for j, block in enumerate(content):
        kind = block.get("type")
        if kind == "text" and not block.get("text"):
            return f"messages.{i}.content.{j}.text: text content blocks must be non-empty"
        if kind == "image" and block.get("source", {}).get("type") not in ("base64", "url"):
            return f"messages.{i}.content.{j}.source: unknown image source"
        if kind == "tool_result" and block.get("tool_use_id") not in called:
            return (f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                    f"`tool_use` block in the previous message.")
        if kind == "tool_use" and not isinstance(block.get("input"), dict):
            return f"messages.{i}.content.{j}.tool_use.input: Input should be a valid dictionary"
        if kind not in ("text", "image", "tool_use", "tool_result", "document", "thinking", "redacted_thinking",
                        "server_tool_use", "web_search_tool_result", "search_result"):
            return f"messages.{i}.content.{j}: Input tag '{kind}' does not match any of the expected tags"
    return None


def _blocks(message: Json | None) -> list[Json]:
    content = message.get("content") if message else None
    return content if isinstance(content, list) else []


def answer(body: Json) -> tuple[list[Json], str, str | None, int]:
    """(content blocks, stop_reason, stop_sequence, output tokens) for a request."""
    blocks: list[Json] = []
    if (body.get("thinking") or {}).get("type") == "enabled":
        blocks.append({"type": "thinking", "thinking": "Thinking it over.", "signature": "sig-test"})
    last = body["messages"][-1]
    answered_tool = any(b.get("type") == "tool_result" for b in _blocks(last))
    tools = body.get("tools") or []
    choice = body.get("tool_choice") or {"type": "auto"}
    if tools and choice["type"] != "none" and not answered_tool:
        tool = next((t for t in tools if t["name"] == choice.get("name")), tools[0])
        blocks.append({"type": "text", "text": f"Calling {tool['name']}."})
        blocks.append({"type": "tool_use", "id": f"toolu_test{len(blocks)}", "name": tool["name"],
                       "input": sample_input(tool.get("input_schema") or {})})
        return blocks, "tool_use", None, tokens(blocks)
    text, stop_reason, stop_sequence = cut(f"You said: {last_text(last)}", body)
    blocks.append({"type": "text", "text": text})
    return blocks, stop_reason, stop_sequence, tokens(blocks)


def tokens(blocks: list[Json]) -> int:
    """Output tokens as this server counts them: one a word, arguments included."""
    texts = (b.get("text") or b.get("thinking") or orjson.dumps(b.get("input")).decode() for b in blocks)
    return sum(len(words(text)) for text in texts)


def cut(text: str, body: Json) -> tuple[str, str, str | None]:
    """The answer as stop_sequences and max_tokens (one word, one token) leave it."""
    hits = [(text.find(s), s) for s in body.get("stop_sequences") or [] if s in text]
    if hits:
        at, sequence = min(hits)
        return text[:at], "stop_sequence", sequence
    pieces = words(text)
    if len(pieces) > body["max_tokens"]:
        return "".join(pieces[:body["max_tokens"]]), "max_tokens", None
    return text, "end_turn", None


def words(text: str) -> list[str]:
    return re.findall(r"\S+\s*|\s+", text)


def last_text(message: Json) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    texts = []
    for block in content:
        if block.get("type") == "text":
            texts.append(block["text"])
        elif block.get("type") == "tool_result":
            inner = block.get("content", "")
            texts.append(inner if isinstance(inner, str) else " ".join(b.get("text", "") for b in inner))
    return " ".join(texts)


def sample_input(schema: Json) -> Json:
    """Arguments that fit a tool's JSON schema well enough for tests."""
    samples = {"string": "test", "integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}}
    properties = schema.get("properties") or {}
    return {name: samples.get(prop.get("type"), None) for name, prop in properties.items()}


def error_response(status: int, kind: str, message: str) -> web.Response:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


@asynccontextmanager
async def run_anthropic_server(**options: Any) -> AsyncIterator[AnthropicTestServer]:
    """Serve a test upstream on 127.0.0.1 at a free port for the duration of the block."""
    server = AnthropicTestServer(**options)
    runner = web.AppRunner(server.app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    server.base_url = f"http://127.0.0.1:{port}"
    server.url = f"{server.base_url}/v1"
    try:
        yield server
    finally:
        await runner.cleanup()
