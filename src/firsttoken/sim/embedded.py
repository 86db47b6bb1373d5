"""A simulated region inside the gateway's process: the offline default upstream.

It listens on a loopback port of its own, bound when it is built (so the gateway's upstream URL is
known before anything starts), and is reached through the gateway's ordinary upstream path: pool,
adapter, relay and timing all run exactly as they would for a provider.
"""

from __future__ import annotations

import socket

from aiohttp import web

from firsttoken.sim.region import Region
from firsttoken.sim.server import SimServer
from firsttoken.sim.settings import SimSettings


class EmbeddedRegion:
    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def description(self) -> str:
        return (f"simulated region in this process, no key and no network: {self.settings.describe()}. "
                f"Configure upstreams to reach real providers.")

    async def start(self) -> None:
        app = SimServer(Region(self.settings)).app
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        await web.SockSite(self._runner, self._socket).start()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._socket.close()
