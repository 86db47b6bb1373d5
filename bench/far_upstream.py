"""An upstream as far away as a data centre across an ocean: the static answers of bench/fixtures.py (a
completion at /json/v1/chat/completions, a stream at /sse/v1/...), each after --first-byte-ms, as a client
in Lagos waits about 150 ms for Virginia's first byte before any queue or prefill. One aiohttp process; the
wait is a timer, so it costs the machine nothing. A benchmark tool.

    .venv/bin/python bench/far_upstream.py --port 8000 [--first-byte-ms 150]
"""

from __future__ import annotations

import argparse
import asyncio

from aiohttp import web
from fixtures import COMPLETION, MODELS, STREAM


def app(first_byte_s: float) -> web.Application:
    async def answer(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(first_byte_s)
        if request.match_info["shape"] == "sse":
            return web.Response(text=STREAM, content_type="text/event-stream")
        return web.Response(text=COMPLETION, content_type="application/json")

    async def models(_: web.Request) -> web.Response:
        return web.Response(text=MODELS, content_type="application/json")

    served = web.Application(client_max_size=64 * 1024 * 1024)
    served.router.add_post("/{shape:json|sse}/v1/chat/completions", answer)
    served.router.add_get("/{shape:json|sse}/v1/models", models)
    return served


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--first-byte-ms", type=float, default=150.0)
    args = parser.parse_args()
    web.run_app(app(args.first_byte_ms / 1000), host="127.0.0.1", port=args.port, print=None,
                access_log=None)


if __name__ == "__main__":
    main()
