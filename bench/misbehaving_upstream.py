"""An OpenAI-compatible upstream for the routing benchmarks (bench/hedging.py, bench/failover.py), whose
behaviour is chosen by the model name. Each model streams ten tokens, or answers whole when asked.

  stalls     first token after 50 ms, except every tenth request: 2 s (a GPU queue, a cold start)
  steady     first token after 60 ms
  fail-500   HTTP 500, every time
  reset      accepts the request and drops the connection
  limited    HTTP 429 with Retry-After: 1, every time
  near, far  first token after 30 ms and 150 ms; POST /degrade?model=near&ms=400 changes it

GET /counts says how many requests each model had (and how many streams were cut off by the client).

    python bench/misbehaving_upstream.py PORT
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter

from aiohttp import web

FIRST_TOKEN_S = {"stalls": 0.05, "steady": 0.06, "near": 0.03, "far": 0.15}
STALL_S, STALL_EVERY = 2.0, 10
counts: Counter[str] = Counter()


def chunk(model: str, delta: dict) -> bytes:
    return b"data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": model,
                                   "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}).encode() + b"\n\n"


async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    model = body["model"]
    counts[model] += 1
    if model == "fail-500":
        return web.json_response({"error": {"message": "synthetic 500", "type": "server_error", "param": None,
                                            "code": None}}, status=500)
    if model == "limited":
        return web.json_response({"error": {"message": "synthetic 429", "type": "requests", "param": None,
                                            "code": "rate_limit_exceeded"}}, status=429, headers={"Retry-After": "1"})
    if model == "reset":
        assert request.transport is not None
        request.transport.abort()
        return web.Response()
    wait = FIRST_TOKEN_S[model]
    if model == "stalls" and counts[model] % STALL_EVERY == 0:
        wait = STALL_S
    if not body.get("stream"):
        await asyncio.sleep(wait)
        return web.json_response({"id": "c", "object": "chat.completion", "created": 1, "model": model,
                                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "t" * 10},
                                               "finish_reason": "stop"}],
                                  "usage": {"prompt_tokens": 5, "completion_tokens": 10, "total_tokens": 15}})
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    try:
        await response.write(chunk(model, {"role": "assistant", "content": ""}))
        await asyncio.sleep(wait)
        for i in range(10):
            await response.write(chunk(model, {"content": f" t{i}"}))
            await asyncio.sleep(0.005)
        await response.write(b"data: [DONE]\n\n")
    except (ConnectionError, asyncio.CancelledError):
        counts[f"{model} cut off"] += 1
    return response


async def degrade(request: web.Request) -> web.Response:
    FIRST_TOKEN_S[request.query["model"]] = int(request.query["ms"]) / 1000
    return web.json_response(FIRST_TOKEN_S)


async def models(_: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": m, "object": "model"} for m in FIRST_TOKEN_S]})


async def show_counts(_: web.Request) -> web.Response:
    return web.json_response(counts)


def main() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/counts", show_counts)
    app.router.add_post("/degrade", degrade)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)


if __name__ == "__main__":
    main()
