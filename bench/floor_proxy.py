"""The floor of this stack: a 20-line raw ASGI proxy on uvicorn (httptools, uvloop) with a pooled
aiohttp client, forwarding bytes and nothing else. Every feature of firsttoken is paid for out of
the gap between this and the targets; the benchmark runs it beside the others.

    python bench/floor_proxy.py PORT UPSTREAM_BASE_URL
"""

import sys

import aiohttp
import uvicorn

PORT, UPSTREAM = int(sys.argv[1]), sys.argv[2]
session: aiohttp.ClientSession | None = None


async def app(scope, receive, send):  # type: ignore[no-untyped-def]
    global session
    if scope["type"] == "lifespan":
        while (await receive())["type"] == "lifespan.startup":
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = (await receive())["body"]
    kind = "sse" if b'"stream":true' in body else "json"
    async with session.post(f"{UPSTREAM}/{kind}/v1/chat/completions", data=body,  # type: ignore[union-attr]
                            headers={"content-type": "application/json"}) as upstream:
        content_type = upstream.headers["content-type"].encode()
        await send({"type": "http.response.start", "status": upstream.status,
                    "headers": [(b"content-type", content_type)]})
        async for chunk in upstream.content.iter_any():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


uvicorn.run(app, host="127.0.0.1", port=PORT, http="httptools", loop="uvloop", access_log=False, log_level="warning")
