"""The connector that times its own handshakes: DNS, TCP and TLS of each new connection, apart.

aiohttp's TraceConfig reports DNS and the whole connection, but through a chain of signal sends on every
request (which cost more CPU than the rest of the gateway's request path), and it cannot tell TCP from
TLS: `loop.create_connection` does both. This hooks only the rare event of opening a connection. The
split point is asyncio's own order of work: the protocol factory is called once the TCP socket is
connected and before the TLS handshake starts, in the task that is opening the connection.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from time import monotonic, perf_counter
from typing import Any

import aiohttp

log = logging.getLogger("firsttoken.pool")
WAIT_WARNING_S = 60.0  # at most one warning a minute per pool: a queue that lasts is one problem, not thousands


@dataclass(slots=True)
class Handshake:
    """perf_counter() readings while one connection opened; each later one is 0.0 until reached."""

    start: float
    resolved: float = 0.0    # the host's addresses known (instant for an IP or a cached name)
    connected: float = 0.0   # the TCP handshake done
    done: float = 0.0        # the TLS handshake done (or, in plain HTTP, the connection ready)
    tls: bool = False

    @property
    def dns_ms(self) -> float:
        return (self.resolved - self.start) * 1000.0 if self.resolved else 0.0

    @property
    def tcp_ms(self) -> float:
        return (self.connected - (self.resolved or self.start)) * 1000.0 if self.connected else 0.0

    @property
    def tls_ms(self) -> float:
        return (self.done - self.connected) * 1000.0 if self.tls and self.connected and self.done else 0.0

    @property
    def total_ms(self) -> float:
        return (self.done - self.start) * 1000.0 if self.done else 0.0

    def as_dict(self) -> dict[str, float]:
        return {"dns": round(self.dns_ms, 2), "tcp": round(self.tcp_ms, 2), "tls": round(self.tls_ms, 2)}


_opening: ContextVar[Handshake | None] = ContextVar("firsttoken_opening", default=None)
# Seconds the current task's requests waited for a free connection (the pool at its limit), until taken.
_queued: ContextVar[float] = ContextVar("firsttoken_queued", default=0.0)


class TimedConnector(aiohttp.TCPConnector):
    """A TCPConnector that keeps, for each connection it opened, how the opening went."""

    def __init__(self, name: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name  # the upstream's, for the warning when requests queue for a connection
        self._warned_at = -WAIT_WARNING_S
        self.opened: weakref.WeakKeyDictionary[Any, Handshake] = weakref.WeakKeyDictionary()
        self.connections_opened = 0  # ever, by this connector
        self.waiting = 0  # requests waiting for a free connection now (every one the limit allows is busy)
        self.waited = 0  # requests that had to wait, ever
        make_protocol = self._factory

        def timed_factory() -> Any:
            handshake = _opening.get()
            if handshake is not None and not handshake.connected:
                handshake.connected = perf_counter()
            return make_protocol()

        self._factory = timed_factory  # type: ignore[assignment]  # aiohttp types its own as a partial

    async def _resolve_host(self, host: str, port: int, traces: Sequence[Any] | None = None) -> Any:
        try:
            return await super()._resolve_host(host, port, traces=traces)
        finally:
            handshake = _opening.get()
            if handshake is not None and not handshake.resolved:
                handshake.resolved = perf_counter()

    async def _create_connection(self, req: Any, traces: Any, timeout: Any) -> Any:
        handshake = Handshake(perf_counter(), tls=req.is_ssl())
        self.connections_opened += 1
        token = _opening.set(handshake)
        try:
            protocol = await super()._create_connection(req, traces, timeout)
        finally:
            _opening.reset(token)
        handshake.done = perf_counter()
        self.opened[protocol] = handshake
        return protocol

    async def _wait_for_available_connection(self, key: Any, traces: Any) -> None:
        # Only a request that finds the pool at its limit comes here: timing it costs the others nothing.
        started = perf_counter()
        self.waiting += 1
        self.waited += 1
        if started - self._warned_at >= WAIT_WARNING_S:
            self._warned_at = started
            log.warning("upstream %s: requests are waiting for a free connection (%d now): all %d its pool may "
                        "hold are busy, most likely with long streams; raise upstreams.%s.pool.max", self.name,
                        self.waiting, self.limit, self.name)
        try:
            await super()._wait_for_available_connection(key, traces)
        finally:
            self.waiting -= 1
            _queued.set(_queued.get() + perf_counter() - started)

    def idle_for(self) -> list[float]:
        """Seconds each idle connection has waited since it was last given back. aiohttp (3.11 on: its pull
        request 9672) keeps them in that order and hands out the longest idle first, so traffic takes its
        turn on every one of them (tests/server/test_connections.py fails if a release reverses it)."""
        now = monotonic()
        return [now - released for idle in self._conns.values() for _, released in idle]

    @property
    def in_use(self) -> int:
        return len(self._acquired)

    def handshake(self, response: aiohttp.ClientResponse) -> Handshake | None:
        """How this response's connection was opened, or None when it was reused (asked once: it is
        forgotten here, so the next request on the same connection reads as reused)."""
        protocol = protocol_of(response)
        return self.opened.pop(protocol, None) if protocol is not None else None


def protocol_of(response: aiohttp.ClientResponse) -> Any:
    # aiohttp hands a connection back to the pool as soon as a short body is complete, so
    # `response.connection` may already be None here; the response keeps its protocol.
    protocol = getattr(response, "_protocol", None)
    if protocol is None and response.connection is not None:
        protocol = response.connection.protocol
    return protocol


def take_queued_ms() -> float:
    """How long this task's last request waited for a free connection (ms; 0 when one was free)."""
    waited = _queued.get()
    if not waited:
        return 0.0
    _queued.set(0.0)
    return waited * 1000.0
