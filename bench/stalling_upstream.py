"""An OpenAI-compatible upstream for bench/hedging.py: `stalls` gives its first token after 50 ms, except
every tenth request, which waits 2 s (a GPU queue, a cold start); `steady` always after 60 ms. Streams
ten tokens. GET /counts says how many requests each model had.

    python bench/stalling_upstream.py PORT
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter

from aiohttp import web

FIRST_TOKEN_S = {"stalls": 0.05, "steady": 0.06}
STALL_S, STALL_EVERY = 2.0, 10
counts: Counter[str] = Counter()


def chunk(model: str, delta: dict) -> bytes:
    return b"data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": model,
                                   "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}).encode() + b"\n\n"


async def chat(request: web.Request) -> web.StreamResponse:
    model = (await request.json())["model"]
    counts[model] += 1
    wait = FIRST_TOKEN_S[model]
    if model == "stalls" and counts[model] % STALL_EVERY == 0:
        wait = STALL_S
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


async def models(_: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": m, "object": "model"} for m in FIRST_TOKEN_S]})


async def show_counts(_: web.Request) -> web.Response:
    return web.json_response(counts)


def main() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/counts", show_counts)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)


if __name__ == "__main__":
    main()
