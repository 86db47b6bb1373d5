r"""An OpenAI chat upstream on loopback that fails on purpose, one way per model name: the fault is the name's
first dot-separated part (`stall-first-byte.stream.messages`), so that each cell of the fault matrix has a
target of its own (and its own breaker) while one server serves them all. Both shapes are served: a request
with `stream: true` gets the fault as a stream breaks, one without as a whole answer breaks.

  reset-before-headers  the connection is reset (RST) as the request arrives
  status-5xx            503 with an OpenAI error body
  status-429            429 with `Retry-After: 30`
  stall-first-byte      nothing at all for STALL_S
  stall-mid-stream      the headers and the first token (a stream) or half the body (whole), then nothing
  reset-mid-stream      the same, then the connection is reset
  not-sse               200, an HTML page (to a stream request too)
  garbage-events        200 text/event-stream, events that do not parse, then [DONE] (to a whole request too)
  truncated-json        a stream's token, then an event cut mid-JSON and the connection closed; a whole
                        answer cut in half
  oversize-event        a token, then one event (a whole body) of OVERSIZE bytes, then the answer's end
  drip                  a healthy answer in two pieces DRIP_S apart: well under the gateway's stall bounds
  healthy               a healthy answer at once
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import struct
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from support.loopback import serve_on_loopback

STALL_S = 5.0  # far past the gateway's bounds: the gateway gives up first
# Under the gateway's bounds in the matrix (0.4 s) by a quarter of a second: a busy machine's late wake-up,
# here or in the gateway, must not make an upstream within its bounds look stalled.
DRIP_S = 0.15
OVERSIZE = 9 * 1024 * 1024  # one event past the gateway's bound (firsttoken.sse.MAX_EVENT_BYTES)
TEXT = "a whole answer"


def completion(model: str, text: str = TEXT) -> dict[str, Any]:
    return {"id": "chatcmpl-fault", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}


def chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    payload = {"id": "chatcmpl-fault", "object": "chat.completion.chunk", "created": int(time.time()),
               "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def answer_events(model: str, anthropic: bool = False) -> list[bytes]:
    """A healthy stream of TEXT, a word an event (the first two: the start and the first token)."""
    words = [(" " if i else "") + word for i, word in enumerate(TEXT.split(" "))]
    if anthropic:
        return [named("message_start", {"message": {**message(model, ""), "content": []}})
                + named("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
                *(named("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": word}})
                  for word in words),
                named("content_block_stop", {"index": 0}),
                named("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                        "usage": {"output_tokens": 3}}),
                named("message_stop", {})]
    return [chunk(model, {"role": "assistant", "content": ""}),
            *(chunk(model, {"content": word}) for word in words),
            chunk(model, {}, "stop"), b"data: [DONE]\n\n"]


def message(model: str, text: str = TEXT) -> dict[str, Any]:
    """A whole answer in Anthropic's Messages format."""
    return {"id": "msg_fault", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 3}}


def named(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + json.dumps({"type": name, **data}).encode() + b"\n\n"


def speaks_anthropic(request: web.Request) -> bool:
    return request.path.endswith("/messages")


def whole_answer(request: web.Request, model: str, text: str = TEXT) -> dict[str, Any]:
    return message(model, text) if speaks_anthropic(request) else completion(model, text)


def error_body(request: web.Request, kind: str, text: str) -> dict[str, Any]:
    if speaks_anthropic(request):
        return {"type": "error", "error": {"type": kind, "message": text}}
    return {"error": {"message": text, "type": kind, "param": None, "code": kind}}


def reset(request: web.Request) -> None:
    """Close the connection with a TCP reset, as a crashed proxy or a load balancer does."""
    transport = request.transport
    assert transport is not None
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def stream_start(request: web.Request, content_type: str = "text/event-stream") -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": content_type})
    await response.prepare(request)
    return response


async def first_half(request: web.Request, model: str, stream: bool) -> web.StreamResponse:
    """The headers and the first token (a stream), or the first half of a whole answer's body."""
    if stream:
        response = await stream_start(request)
        await response.write(b"".join(answer_events(model, speaks_anthropic(request))[:2]))
        return response
    response = await stream_start(request, "application/json")
    whole = json.dumps(whole_answer(request, model)).encode()
    await response.write(whole[: len(whole) // 2])
    return response


async def reset_before_headers(request: web.Request, model: str, stream: bool) -> web.StreamResponse:
    reset(request)
    return web.Response()  # never sent: the connection is gone


async def status_5xx(request: web.Request, model: str, stream: bool) -> web.StreamResponse:
    return web.json_response(error_body(request, "overloaded", "the model is overloaded"), status=503)


async def status_429(request: web.Request, model: str, stream: bool) -> web.StreamResponse:
    return web.json_response(error_body(request, "rate_limit_exceeded", "Rate limit reached"), status=429,
                             headers={"Retry-After": "30"})


async def stall_first_byte(request: web.Request, model: str, stream: bool) -> web.StreamResponse:
    await asyncio.sleep(STALL_S)
    return web.json_response(whole_answer(request, model))


async def stall_mid_stream(request: web.Request, model: str, stream: bool) -> web.StreamResponse:
    response = await first_half(request, model, stream)
    await asyncio.sleep(STALL_S)
    return response


async def reset_mid_stream(request: web.Request, model: str, stream: bool) -> web.StreamResponse:
    response = await first_half(request, model, stream)
    await asyncio.sleep(0.05)  # what came so far reaches the gateway first
    reset(request)
    return response


async def not_sse(request: web.Request, model: str, stream: bool) -> web.StreamResponse:
    return web.Response(text="<html><body><h1>502 Bad Gateway</h1></body></html>", content_type="text/html")


async def garbage_events(request: web.Request, model: str, stream: bool) -> web.StreamResponse:
    response = await stream_start(request)
    if speaks_anthropic(request):
        await response.write(b"event: message_start\ndata: {not json at all\n\nevent: message_stop\ndata: <<<>>>\n\n")
    else:
        await response.write(b"data: {not json at all\n\ndata: <<<>>>\n\ndata: [DONE]\n\n")
    await response.write_eof()
    return response


async def truncated_json(request: web.Request, model: str, stream: bool) -> web.StreamResponse:
    anthropic = speaks_anthropic(request)
    if not stream:
        whole = json.dumps(whole_answer(request, model))
        return web.Response(text=whole[: len(whole) // 2], content_type="application/json")
    response = await stream_start(request)
    cut = answer_events(model, anthropic)[2]
    await response.write(b"".join(answer_events(model, anthropic)[:2]) + cut[: len(cut) // 2])
    await response.write_eof()
    return response


async def oversize_event(request: web.Request, model: str, stream: bool) -> web.StreamResponse:
    big = "x" * OVERSIZE
    if not stream:
        return web.json_response(whole_answer(request, model, f"{TEXT} {big}"))
    events = answer_events(model, speaks_anthropic(request))
    response = await stream_start(request)
    await response.write(b"".join(events[:2]) + events[2].replace(b"whole", big.encode()) + b"".join(events[3:]))
    await response.write_eof()
    return response


async def drip(request: web.Request, model: str, stream: bool) -> web.StreamResponse:
    """Two pieces: the first DRIP_S after the request (the first-byte bound), the second DRIP_S later (idle)."""
    if stream:
        events = answer_events(model, speaks_anthropic(request))
        pieces = [b"".join(events[:2]), b"".join(events[2:])]
    else:
        whole = json.dumps(whole_answer(request, model)).encode()
        pieces = [whole[: len(whole) // 2], whole[len(whole) // 2:]]
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream" if stream else "application/json"})
    for i, piece in enumerate(pieces):
        await asyncio.sleep(DRIP_S)
        if i == 0:
            await response.prepare(request)
        await response.write(piece)
    await response.write_eof()
    return response


async def healthy(request: web.Request, model: str, stream: bool) -> web.StreamResponse:
    if not stream:
        return web.json_response(whole_answer(request, model))
    response = await stream_start(request)
    await response.write(b"".join(answer_events(model, speaks_anthropic(request))))
    await response.write_eof()
    return response


Fault = Callable[[web.Request, str, bool], Awaitable[web.StreamResponse]]
FAULTS: dict[str, Fault] = {
    "reset-before-headers": reset_before_headers, "status-5xx": status_5xx, "status-429": status_429,
    "stall-first-byte": stall_first_byte, "stall-mid-stream": stall_mid_stream, "reset-mid-stream": reset_mid_stream,
    "not-sse": not_sse, "garbage-events": garbage_events, "truncated-json": truncated_json,
    "oversize-event": oversize_event, "drip": drip, "healthy": healthy,
}


class FaultUpstream:
    """The server's state, read by the tests: requests per model name."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.bodies: list[bytes] = []  # every chat request's body, as it came
        self.port = 0

    def asked(self, model: str, text: str) -> int:
        """How many requests for `model` held `text` (a question)."""
        return sum(1 for body in self.bodies if model.encode() in body and text.encode() in body)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def app(self) -> web.Application:
        async def chat(request: web.Request) -> web.StreamResponse:
            raw = await request.read()
            self.bodies.append(raw)
            body = json.loads(raw)
            model = str(body.get("model"))
            self.hits[model] += 1
            fault = FAULTS.get(model.split(".")[0])
            if fault is None:
                return web.json_response({"error": {"message": f"no fault {model!r}"}}, status=404)
            try:
                return await fault(request, model, bool(body.get("stream")))
            except (ConnectionError, RuntimeError):  # the gateway gave up and closed first
                return web.Response()

        async def models(request: web.Request) -> web.Response:
            return web.json_response({"object": "list", "data": []})

        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_post("/anthropic/v1/messages", chat)  # the same faults, spoken as Anthropic's API
        app.router.add_get("/v1/models", models)
        app.router.add_get("/anthropic/v1/models", models)
        return app

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[FaultUpstream]:
        async with serve_on_loopback(self.app(), handler_cancellation=True, shutdown_timeout=0.5) as port:
            self.port = port
            yield self


class Untrusted:
    """A TLS listener whose certificate (trustme's, from a CA nobody trusts) the gateway must refuse; it
    counts the connections that reach it."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context
        self.connections = 0
        self.port = 0

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[Untrusted]:
        untrusted = self

        class Counted(asyncio.Protocol):
            def __init__(self) -> None:
                untrusted.connections += 1

        server = await asyncio.get_running_loop().create_server(Counted, "127.0.0.1", 0, ssl=self.context)
        self.port = server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            server.close()
