"""A real OpenAI-compatible HTTP server on loopback, for tests: its behaviour is chosen by the model name.

  echo            replies "echo: <last user text>", word by word when streaming
  tools           calls the first tool given, arguments streamed in pieces
  inspect         replies with the JSON body it received, as the message content
  sleep-<ms>      like echo, after waiting <ms> before the first token
  late-<ms>       like echo, streaming its headers and role chunk at once, then its first token after <ms>
  fail-midstream  streams two tokens, then drops the connection
  error-<status>  answers that HTTP status with an OpenAI error body (429 with Retry-After)
  hang            accepts the request and never answers
  flood           streams about 64 MB of tokens as fast as it can
  redirect        answers 307 to another address (which must never see our key)
and the broken answers of support/faulty_answers.py (not-json, html, cut-stream, key-in-stream, drip-<ms>, …).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from support.faulty_answers import UPSTREAM_KEY, fault
from support.loopback import serve_on_loopback
from support.threaded import InThread

MODELS = ["echo", "tools", "inspect", "fail-midstream", "hang", "sleep-1000", "error-429", "error-400"]


class Stats:
    """What the upstream saw. `requests` counts everything, the pools' own warm-up and refresh calls too;
    `chats` only chat completions, which is what a test of the gateway's forwarding wants."""

    def __init__(self) -> None:
        self.connections: set[object] = set()
        self.requests = 0
        self.by_model: Counter[str] = Counter()  # chat requests per model named
        self.aborted_streams = 0
        self.bad_auth = 0
        self.last_body: dict[str, Any] | None = None
        self.last_path = ""

    @property
    def chats(self) -> int:
        return sum(self.by_model.values())


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    payload = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": int(time.time()),
               "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content)
    return ""


def build_app(stats: Stats) -> web.Application:
    async def track(request: web.Request) -> None:
        stats.requests += 1
        stats.connections.add(request.transport)  # strong refs: ids of closed ones are never reused
        azure = request.path.startswith("/openai/")
        if azure and (request.headers.get("api-key") != UPSTREAM_KEY or not request.query.get("api-version")):
            stats.bad_auth += 1
        elif not azure and request.headers.get("Authorization") != f"Bearer {UPSTREAM_KEY}":
            stats.bad_auth += 1

    async def models(request: web.Request) -> web.Response:
        await track(request)
        return web.json_response({"object": "list", "data": [{"id": m, "object": "model"} for m in MODELS]})

    async def embeddings(request: web.Request) -> web.Response:
        await track(request)
        stats.last_path = request.path_qs
        body = await request.json()
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        return web.json_response({"object": "list", "model": body["model"], "usage": _usage(len(inputs), 0),
                                  "data": [{"object": "embedding", "index": i, "embedding": [0.1, 0.2, 0.3]}
                                           for i, _ in enumerate(inputs)]})

    async def stats_view(request: web.Request) -> web.Response:
        return web.json_response({"connections": len(stats.connections), "requests": stats.requests,
                                  "aborted_streams": stats.aborted_streams, "bad_auth": stats.bad_auth})

    async def chat(request: web.Request) -> web.StreamResponse:
        await track(request)
        body = await request.json()
        stats.last_body = body
        stats.last_path = request.path_qs
        # Azure names the model in the URL (the deployment), not in the body
        model = request.match_info.get("deployment") or body["model"]
        stats.by_model[model] += 1
        broken = fault(model)
        if broken is not None:
            return await broken(request, model)
        if model.startswith("error-"):
            status = int(model.split("-")[1])
            headers = {"Retry-After": "7", "x-ratelimit-remaining-requests": "0"} if status == 429 else {}
            return web.json_response({"error": {"message": f"synthetic error {status} from the test upstream",
                                                "type": ("rate_limit_error" if status == 429
                                                         else "invalid_request_error"),
                                                "param": "messages" if status == 400 else None,
                                                "code": f"synthetic_{status}"}}, status=status, headers=headers)
        if model == "redirect":
            raise web.HTTPTemporaryRedirect("http://127.0.0.1:9/v1/chat/completions")
        if model == "hang":
            await asyncio.sleep(3600)
        if model.startswith("sleep-"):
            await asyncio.sleep(int(model.split("-")[1]) / 1000)
        if model == "inspect":
            words = [json.dumps(body, sort_keys=True)]
        elif model == "tools":
            words = []
        else:
            words = ("echo: " + _last_user_text(body)).split(" ")
        # "no-store": an answer the upstream marks as not to be cached
        marks = {"Cache-Control": "no-store"} if model == "no-store" else {}
        if model == "slow-body" and not body.get("stream"):  # headers at once, the answer 3 s later
            slow = web.StreamResponse(headers={"Content-Type": "application/json"})
            await slow.prepare(request)
            await asyncio.sleep(3)
            await slow.write(json.dumps({"id": "chatcmpl-test", "object": "chat.completion", "created": 1,
                                         "model": model, "choices": []}).encode())
            return slow
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": " ".join(words) if words else None}
            finish = "stop"
            if model == "tools":
                tool = body["tools"][0]["function"]["name"]
                message["tool_calls"] = [{"id": "call_1", "type": "function",
                                          "function": {"name": tool, "arguments": '{"city": "Lagos"}'}}]
                finish = "tool_calls"
            return web.json_response({"id": "chatcmpl-test", "object": "chat.completion", "created": 1,
                                      "model": model, "choices": [{"index": 0, "message": message,
                                                                   "finish_reason": finish}],
                                      "usage": _usage(10, len(words))}, headers=marks)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **marks})
        await response.prepare(request)
        usage_asked = (body.get("stream_options") or {}).get("include_usage")
        extra = {"usage": None} if usage_asked else {}
        try:
            await response.write(_chunk(model, {"role": "assistant", "content": ""}, **extra))
            if model == "refuse-in-stream":  # the stream opens, then the upstream refuses the request in it
                refusal = {"error": {"message": "This model's maximum context length is 8192 tokens.",
                                     "type": "invalid_request_error", "param": "messages",
                                     "code": "context_length_exceeded"}}
                await response.write(b"data: " + json.dumps(refusal).encode() + b"\n\ndata: [DONE]\n\n")
                await response.write_eof()
                return response
            if model == "fail-early":  # the stream opens, then the connection drops before any token
                assert request.transport is not None
                request.transport.abort()
                return response
            if model.startswith("late-"):  # a provider's queue: the stream is open, the first token is not
                await asyncio.sleep(int(model.split("-")[1]) / 1000)
            if model == "flood":
                piece = _chunk(model, {"content": "x" * 4000})
                for _ in range(16_000):
                    await response.write(piece)
            if model == "tools":
                tool = body["tools"][0]["function"]["name"]
                call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": tool, "arguments": ""}}
                await response.write(_chunk(model, {"tool_calls": [call]}, **extra))
                for piece in ('{"city"', ': "Lag', 'os"}'):
                    delta = {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
                    await response.write(_chunk(model, delta, **extra))
                finish = "tool_calls"
            else:
                for i, word in enumerate(words):
                    await response.write(_chunk(model, {"content": word if i == 0 else " " + word}, **extra))
                    if model == "fail-midstream" and i == 1:
                        assert request.transport is not None
                        request.transport.abort()
                        return response
                    if model == "slow-stream":
                        await asyncio.sleep(0.05)
                finish = "stop"
            await response.write(_chunk(model, {}, finish, **extra))
            if usage_asked:
                payload = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1, "model": model,
                           "choices": [], "usage": _usage(10, max(len(words), 1))}
                await response.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except (ConnectionResetError, ConnectionError, asyncio.CancelledError):
            stats.aborted_streams += 1
            raise
        return response

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_get("/_stats", stats_view)
    app.router.add_get("/openai/models", models)  # Azure OpenAI's layout
    app.router.add_post("/openai/deployments/{deployment}/chat/completions", chat)
    app.router.add_post("/openai/deployments/{deployment}/embeddings", embeddings)
    return app


@asynccontextmanager
async def run_openai_upstream(stats: Stats, keepalive_s: float | None = None) -> AsyncIterator[int]:
    """Serve on 127.0.0.1 at a free port (yielded) for the duration of the block.

    keepalive_s: close idle connections after this long, and say so in a Keep-Alive header."""
    app = build_app(stats)
    options: dict[str, Any] = {}
    if keepalive_s is not None:
        options["keepalive_timeout"] = keepalive_s
        header = f"timeout={keepalive_s:g}"

        async def announce(_request: web.Request, response: web.StreamResponse) -> None:
            response.headers["Keep-Alive"] = header

        app.on_response_prepare.append(announce)
    async with serve_on_loopback(app, handler_cancellation=True, **options) as port:
        yield port


class UpstreamThread:
    """The server on its own event loop in a thread, so synchronous tests and SDKs can use it."""

    def __init__(self, keepalive_s: float | None = None) -> None:
        self.stats = Stats()
        self._server = InThread(lambda: run_openai_upstream(self.stats, keepalive_s))
        self.port = 0

    def __enter__(self) -> UpstreamThread:
        self.port = self._server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.__exit__(*exc)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"
