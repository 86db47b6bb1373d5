"""The simulated region's HTTP face: OpenAI chat completions (streaming and not) and /v1/models.

A test and demo upstream, not the gateway's hot path, so it is written on aiohttp.web for clarity.
Ground truth travels with every answer: `Server-Timing: queue, cold, prefill` (sent when the first
token is ready) and, on streams, `: sim-timing decode;dur=…` before `[DONE]`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from aiohttp import web

from firsttoken.sim import text
from firsttoken.sim.engine import Sequence
from firsttoken.sim.region import Region

DEFAULT_MAX_TOKENS = 128


def _error(status: int, message: str, param: str | None = None, code: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def _chunk(base: dict[str, Any], delta: dict[str, Any], finish: str | None = None) -> bytes:
    payload = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + orjson.dumps(payload) + b"\n\n"


class SimServer:
    def __init__(self, region: Region, model: str) -> None:
        self.region = region
        self.model = model
        self.app = web.Application()
        self.app.router.add_post("/v1/chat/completions", self.chat)
        self.app.router.add_get("/v1/models", self.models)
        self.app.on_startup.append(self._start)
        self.app.on_cleanup.append(self._stop)

    async def _start(self, _app: web.Application) -> None:
        self.region.start()

    async def _stop(self, _app: web.Application) -> None:
        await self.region.close()

    async def models(self, request: web.Request) -> web.Response:
        model = {"id": self.model, "object": "model", "created": 0, "owned_by": "firsttoken-sim"}
        return web.json_response({"object": "list", "data": [model]})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _error(400, "The request body is not valid JSON.", code="invalid_json")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
            return _error(400, "'messages' must be a non-empty list.", param="messages")
        if body.get("model") != self.model:
            return _error(404, f"This region serves {self.model!r} only.", param="model", code="model_not_found")
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS
        if not isinstance(max_tokens, int) or max_tokens < 1:
            return _error(400, "'max_tokens' must be a positive integer.", param="max_tokens")
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else [s for s in stop if isinstance(s, str) and s]
        pieces, finish = text.answer(max_tokens, stop)
        prompt = text.prompt_tokens(body["messages"])
        loop = asyncio.get_running_loop()
        sequence = Sequence(prompt, max(len(pieces), 1), loop.time())
        try:
            tokens = self.region.submit(sequence)
        except ValueError as exc:
            return _error(400, str(exc), param="messages", code="context_length_exceeded")
        try:
            first = await tokens.get()
            timing = self._server_timing(sequence, first)
            usage = {"prompt_tokens": prompt, "completion_tokens": len(pieces),
                     "total_tokens": prompt + len(pieces)}
            base = {"id": f"chatcmpl-sim{id(sequence):x}", "object": "chat.completion.chunk",
                    "created": int(time.time()), "model": self.model}
            if not body.get("stream"):
                for _ in range(len(pieces) - 1):
                    await tokens.get()
                message = {"role": "assistant", "content": "".join(pieces)}
                answer = {**base, "object": "chat.completion",
                          "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}
                return web.Response(body=orjson.dumps(answer), content_type="application/json",
                                    headers={"Server-Timing": timing})
            return await self._stream(request, tokens, pieces, finish, base, usage, timing, first, body)
        finally:
            self.region.cancel(sequence)  # a no-op once finished; frees the KV of an abandoned request

    async def _stream(self, request: web.Request, tokens: asyncio.Queue[float], pieces: list[str], finish: str,
                      base: dict[str, Any], usage: dict[str, int], timing: str, first: float,
                      body: dict[str, Any]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                               "Server-Timing": timing})
        await response.prepare(request)
        await response.write(_chunk(base, {"role": "assistant", "content": ""}) + _chunk(base, {"content": pieces[0]}
                                                                                            if pieces else {}))
        last = first
        for piece in pieces[1:]:
            last = await tokens.get()
            await response.write(_chunk(base, {"content": piece}))
        tail = _chunk(base, {}, finish)
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            tail += b"data: " + orjson.dumps({**base, "choices": [], "usage": usage}) + b"\n\n"
        tail += f": sim-timing decode;dur={(last - first) * 1000:.2f}\n\n".encode() + b"data: [DONE]\n\n"
        await response.write(tail)
        await response.write_eof()
        return response

    @staticmethod
    def _server_timing(sequence: Sequence, first: float) -> str:
        admitted = sequence.admitted_at if sequence.admitted_at is not None else sequence.arrived_at
        queue_ms = (admitted - sequence.arrived_at - sequence.cold_s) * 1000
        prefill_ms = (first - admitted) * 1000
        cold_ms = sequence.cold_s * 1000
        return f"queue;dur={max(queue_ms, 0.0):.2f}, cold;dur={cold_ms:.2f}, prefill;dur={prefill_ms:.2f}"
