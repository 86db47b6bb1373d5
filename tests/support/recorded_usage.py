"""A test upstream that answers every request with one recorded answer per wire format, its usage in the
exact shape each provider sends: OpenAI chat completions (prompt cache and reasoning details, the usage
chunk last in a stream), Anthropic Messages (input, cache writes and cache reads apart; output in
message_delta) and OpenAI Responses (input and output details, in response.completed). The counts are
the ones a test prices by hand.

    with InThread(run_recorded_upstream) as upstream:
        upstream.url  # http://127.0.0.1:PORT/v1

A test that needs requests in flight at once shuts `upstream.gate` (support/gate.py): a whole answer waits
there before it is sent, a stream after its first event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from support.gate import Gate

CHAT_USAGE = {"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
              "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
              "completion_tokens_details": {"reasoning_tokens": 256, "audio_tokens": 0,
                                            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
MESSAGES_USAGE = {"input_tokens": 50, "cache_creation_input_tokens": 1500, "cache_read_input_tokens": 12000,
                  "cache_creation": {"ephemeral_5m_input_tokens": 1500, "ephemeral_1h_input_tokens": 0},
                  "output_tokens": 420}
# A request that marks a block to be cached an hour (cache_control's ttl "1h") has its writes kept an hour.
MESSAGES_USAGE_1H = {**MESSAGES_USAGE, "cache_creation": {"ephemeral_5m_input_tokens": 0,
                                                          "ephemeral_1h_input_tokens": 1500}}
RESPONSES_USAGE = {"input_tokens": 3000, "input_tokens_details": {"cached_tokens": 2048}, "output_tokens": 900,
                   "output_tokens_details": {"reasoning_tokens": 832}, "total_tokens": 3900}
TEXT = "Hello from the recorded upstream."


@dataclass
class RecordedUpstream:
    url: str
    requests: int = 0
    gate: Gate = field(default_factory=Gate)  # where answers wait while a test keeps it shut


def _sse(data: Any, event: str | None = None) -> bytes:
    return (f"event: {event}\n".encode() if event else b"") + b"data: " + orjson.dumps(data) + b"\n\n"


def _chat(body: dict[str, Any]) -> list[bytes] | dict[str, Any]:
    model = body["model"]
    if not body.get("stream"):
        return {"id": "chatcmpl-rec", "object": "chat.completion", "created": 1, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": TEXT}, "finish_reason": "stop"}],
                "usage": CHAT_USAGE}
    chunk = {"id": "chatcmpl-rec", "object": "chat.completion.chunk", "created": 1, "model": model}
    events = [_sse({**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": word + " "},
                                          "finish_reason": None}]}) for word in TEXT.split()]
    events.append(_sse({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append(_sse({**chunk, "choices": [], "usage": CHAT_USAGE}))
    return [*events, b"data: [DONE]\n\n"]


def _messages(body: dict[str, Any]) -> list[bytes] | dict[str, Any]:
    system = body.get("system")
    hour = isinstance(system, list) and any(isinstance(block, dict) and (block.get("cache_control") or {}).get("ttl")
                                            == "1h" for block in system)
    counts = MESSAGES_USAGE_1H if hour else MESSAGES_USAGE
    message = {"id": "msg_rec", "type": "message", "role": "assistant", "model": body["model"],
               "content": [{"type": "text", "text": TEXT}], "stop_reason": "end_turn", "stop_sequence": None,
               "usage": counts}
    if not body.get("stream"):
        return message
    start = {**message, "content": [], "stop_reason": None, "usage": {**counts, "output_tokens": 1}}
    return [_sse({"type": "message_start", "message": start}, "message_start"),
            _sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                 "content_block_start"),
            *(_sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word + " "}},
                   "content_block_delta") for word in TEXT.split()),
            _sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
            _sse({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                  "usage": {"output_tokens": MESSAGES_USAGE["output_tokens"]}}, "message_delta"),
            _sse({"type": "message_stop"}, "message_stop")]


def _responses(body: dict[str, Any]) -> list[bytes] | dict[str, Any]:
    item = {"type": "message", "id": "msg_rec", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": TEXT, "annotations": []}]}
    response = {"id": "resp_rec", "object": "response", "created_at": 1, "status": "completed", "model": body["model"],
                "output": [item], "usage": RESPONSES_USAGE, "error": None, "incomplete_details": None}
    if not body.get("stream"):
        return response
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    return [_sse({"type": "response.created", "sequence_number": 0, "response": started}, "response.created"),
            _sse({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
                  "item": {**item, "status": "in_progress", "content": []}}, "response.output_item.added"),
            *(_sse({"type": "response.output_text.delta", "sequence_number": 2 + i, "item_id": "msg_rec",
                    "output_index": 0, "content_index": 0, "delta": word + " "}, "response.output_text.delta")
              for i, word in enumerate(TEXT.split())),
            _sse({"type": "response.output_item.done", "sequence_number": 20, "output_index": 0, "item": item},
                 "response.output_item.done"),
            _sse({"type": "response.completed", "sequence_number": 21, "response": response}, "response.completed")]


@asynccontextmanager
async def run_recorded_upstream() -> AsyncIterator[RecordedUpstream]:
    state = RecordedUpstream("")

    def route(answer: Any) -> Any:
        async def handle(request: web.Request) -> web.StreamResponse:
            state.requests += 1
            body = await request.json()
            made = answer(body)
            if isinstance(made, dict):
                await state.gate.passed()
                return web.json_response(made)
            response = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await response.prepare(request)
            for n, event in enumerate(made):
                await response.write(event)
                if n == 0:  # under way: an identical request may join it now
                    await state.gate.passed()
            await response.write_eof()
            return response
        return handle

    app = web.Application()
    app.router.add_post("/v1/chat/completions", route(_chat))
    app.router.add_post("/v1/messages", route(_messages))
    app.router.add_post("/v1/responses", route(_responses))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state.url = f"http://127.0.0.1:{port}/v1"
    try:
        yield state
    finally:
        await runner.cleanup()
