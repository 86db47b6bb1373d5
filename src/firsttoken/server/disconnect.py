"""Work that stops when its client goes away: an abandoned request aborts its upstream connection, so
the provider stops generating too."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from firsttoken.alarms import Alarms
from firsttoken.server.http import Receive

T = TypeVar("T")


async def until_disconnect(receive: Receive, work: Awaitable[T], alarms: Alarms) -> T | None:
    """Run `work`, cancelling it when the client goes away (then None).

    The watch starts only once a request has lived for one tick of the alarms: most requests are
    over before then, and a watcher task for each of them cost a tenth of the gateway's CPU."""
    task = asyncio.current_task()
    assert task is not None
    gone = False
    watcher: asyncio.Task[None] | None = None

    async def watch() -> None:
        nonlocal gone
        while (await receive())["type"] != "http.disconnect":
            pass
        gone = True
        task.cancel()

    def start_watching() -> None:
        nonlocal watcher
        watcher = asyncio.get_running_loop().create_task(watch())

    later = alarms.call_later(0.0, start_watching)
    try:
        return await work
    except asyncio.CancelledError:
        if not gone:
            raise
        task.uncancel()
        return None
    finally:
        alarms.disarm(later)
        if watcher is not None:
            watcher.cancel()
