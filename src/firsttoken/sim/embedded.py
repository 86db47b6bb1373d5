"""A simulated region inside the gateway: the offline default upstream.

It listens on a loopback port of its own, bound when it is built (so the gateway's upstream URL is
known before anything starts), and is reached through the gateway's ordinary upstream path: pool,
adapter, relay and timing all run exactly as they would for a provider. A gateway of one process runs
it on its own event loop; under `--workers N` it runs once, in a process of its own that every worker
reaches (SharedRegion), so that the workers share its GPUs, queue and rate limits as clients of one
data centre would.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import socket
from multiprocessing.process import BaseProcess

from aiohttp import web

from firsttoken.sim.region import Region
from firsttoken.sim.server import SimServer
from firsttoken.sim.settings import SimSettings


def _loopback_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def _url(sock: socket.socket) -> str:
    return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def describe(settings: SimSettings, where: str) -> str:
    return (f"simulated region {where}, no key and no network: {settings.describe()}. "
            f"Configure upstreams to reach real providers.")


class EmbeddedRegion:
    """The region on the gateway's own event loop."""

    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings
        self._socket = _loopback_socket()
        self.url = _url(self._socket)
        self._runner: web.AppRunner | None = None

    @property
    def description(self) -> str:
        return describe(self.settings, "in this process")

    async def start(self) -> None:
        self._runner = await _serve(self.settings, self._socket)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._socket.close()


class SharedRegion:
    """The region in a process of its own, started by the supervisor of `--workers N` before the workers."""

    def __init__(self, settings: SimSettings) -> None:
        sock = _loopback_socket()
        self.url = _url(sock)
        # spawned, like uvicorn's workers: nothing of the supervisor's state is inherited but the socket
        self.process: BaseProcess = multiprocessing.get_context("spawn").Process(
            target=_run, args=(settings, sock), name="firsttoken-region", daemon=True)
        self.process.start()
        sock.close()  # the region's process holds its own copy

    def close(self) -> None:
        self.process.terminate()
        self.process.join(5)


async def _serve(settings: SimSettings, sock: socket.socket) -> web.AppRunner:
    runner = web.AppRunner(SimServer(Region(settings)).app, handler_cancellation=True, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    return runner


def _run(settings: SimSettings, sock: socket.socket) -> None:
    async def forever() -> None:
        await _serve(settings, sock)
        await asyncio.Event().wait()

    try:
        import uvloop  # the loop the workers run on, where it is installed
    except ImportError:
        run = asyncio.run
    else:
        run = uvloop.run
    try:
        run(forever())
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group; the supervisor ends us
        pass
