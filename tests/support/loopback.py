"""Serve an aiohttp application on 127.0.0.1 at a free port for the duration of a block."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web


@asynccontextmanager
async def serve_on_loopback(app: web.Application, ssl_context: ssl.SSLContext | None = None,
                            **runner_options: Any) -> AsyncIterator[int]:
    """Yields the port (HTTPS with `ssl_context`)."""
    runner = web.AppRunner(app, **runner_options)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()
