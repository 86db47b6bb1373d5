"""Serve an aiohttp application on 127.0.0.1 at a free port for the duration of a block."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web


@asynccontextmanager
async def serve_on_loopback(app: web.Application, **runner_options: Any) -> AsyncIterator[int]:
    """Yields the port."""
    runner = web.AppRunner(app, **runner_options)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()
