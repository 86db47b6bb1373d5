"""A simulated region served on loopback from `sim:` settings, in its own thread."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from firsttoken.config import sim_settings
from firsttoken.sim.region import Region
from firsttoken.sim.server import SimServer
from support.loopback import serve_on_loopback
from support.threaded import InThread


@contextmanager
def region_on_loopback(ssl_context: ssl.SSLContext | None = None, **settings: Any) -> Iterator[tuple[int, Region]]:
    """Yields (port, region) of a region built from `sim:` settings, running in its own thread (over
    HTTPS with `ssl_context`)."""
    region = Region(sim_settings(settings))
    with InThread(lambda: serve_on_loopback(SimServer(region).app, ssl_context, handler_cancellation=True)) as port:
        yield port, region
