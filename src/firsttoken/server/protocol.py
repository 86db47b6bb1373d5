"""uvicorn's httptools protocol with deadlines for slow clients and a bound on waiting connections.

uvicorn cancels its keep-alive timer on every byte and has no header or body timeout, so a client
that drips a byte every few seconds (slowloris), or declares a body it never sends, holds its
connection, and a file descriptor, forever. Here a request's headers must arrive within
`header_timeout_s` of its first byte (of the connection's opening, for its first request), its
body within `body_timeout_s` of its headers, and at most `max_pending_connections` connections
may wait for a request's headers (fresh and idle keep-alive ones): past that, the one that has
waited longest is closed. An attacker's connections churn; real clients send their headers in
milliseconds and get through.

The size of a request's headers is bounded here too (`max_header_bytes`): llhttp sets no limit, and
uvicorn would keep collecting headers for as long as a client sends them.

The timing lives below the application because the application only sees a request once its
headers are complete, and a body its route never reads (GET /healthz with a content-length) is
never awaited by it. Per connection this costs a few ordered-dict operations per request: one
timeout for all connections means they expire in the order their clocks started, so a single
timer per worker, set for the earliest deadline, finds the expired ones at the front.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from firsttoken.config import Limits
from firsttoken.errors import GatewayError
from firsttoken.formats.messages import MESSAGES

log = logging.getLogger("firsttoken.server")

# The worker's one timer fires no more often than this: deadlines are seconds long, and expiries a
# few milliseconds apart are handled together.
SWEEP_RESOLUTION_S = 0.05


@dataclass(frozen=True)
class ClientTimeouts:
    header_timeout_s: float
    body_timeout_s: float
    max_pending_connections: int
    max_header_bytes: int = 32 * 1024


def http_protocol(limits: Limits) -> Callable[..., GuardedHttpProtocol]:
    """What to pass as uvicorn's `http=`: a partial of a module-level class and plain numbers, so it
    pickles into the worker processes uvicorn spawns for --workers."""
    return functools.partial(GuardedHttpProtocol, timeouts=ClientTimeouts(
        limits.header_timeout_s, limits.body_timeout_s, limits.max_pending_connections, limits.max_header_bytes))


# A connection's state, as far as the deadlines care.
FRESH = 0  # waiting for a request, with the header clock running since the connection opened
IDLE = 1  # waiting for a request after a response (keep-alive: uvicorn's own timer covers it)
HEADERS = 2  # a request's first bytes have come, its headers not all of them
BODY = 3  # headers complete, body not: its clock starts if a read ends with the body still unfinished
BODY_TIMED = 4  # the body clock is running
BUSY = 5  # the whole request has come: it is being answered


class PendingConnections:
    """One worker's connections waiting for headers or a body, and the one timer that ends the late."""

    def __init__(self, timeouts: ClientTimeouts, loop: asyncio.AbstractEventLoop) -> None:
        self.timeouts = timeouts
        self.loop = loop
        # insertion order is the order each wait (or clock) started, oldest first
        self.waiting: OrderedDict[GuardedHttpProtocol, None] = OrderedDict()
        self.headers_since: OrderedDict[GuardedHttpProtocol, float] = OrderedDict()
        self.body_since: OrderedDict[GuardedHttpProtocol, float] = OrderedDict()
        self._sweep: asyncio.TimerHandle | None = None
        self._sweep_at = 0.0
        self.headers_late = _timeout_body(
            f"The request's headers did not all arrive within {timeouts.header_timeout_s:g} s of its first byte, "
            f"so the gateway closed the connection; send each request whole and promptly (the limit is the "
            f"gateway's limits.header_timeout_s).")
        self.crowded_out = _timeout_body(
            f"More than {timeouts.max_pending_connections} connections were waiting to send a request, and this "
            f"one had waited longest, so the gateway closed it; send each request whole and promptly (the bound "
            f"is the gateway's limits.max_pending_connections).")
        self.body_late = _timeout_body(
            f"The request body did not all arrive within {timeouts.body_timeout_s:g} s of its headers, so the "
            f"gateway closed the connection; send the body promptly and as long as its content-length says "
            f"(the limit is the gateway's limits.body_timeout_s).")

    def wait(self, connection: GuardedHttpProtocol) -> None:
        """`connection` now waits for a request's headers; past the bound, the longest-waiting goes."""
        self.waiting[connection] = None
        if len(self.waiting) > self.timeouts.max_pending_connections:
            oldest, _ = self.waiting.popitem(last=False)
            oldest.evict()

    def start_headers(self, connection: GuardedHttpProtocol) -> None:
        now = self.loop.time()
        self.headers_since[connection] = now
        self._schedule(now + self.timeouts.header_timeout_s)

    def headers_complete(self, connection: GuardedHttpProtocol) -> None:
        self.waiting.pop(connection, None)
        self.headers_since.pop(connection, None)

    def start_body(self, connection: GuardedHttpProtocol) -> None:
        now = self.loop.time()
        self.body_since[connection] = now
        self._schedule(now + self.timeouts.body_timeout_s)

    def body_complete(self, connection: GuardedHttpProtocol) -> None:
        self.body_since.pop(connection, None)

    def forget(self, connection: GuardedHttpProtocol) -> None:
        self.waiting.pop(connection, None)
        self.headers_since.pop(connection, None)
        self.body_since.pop(connection, None)

    def _schedule(self, when: float) -> None:
        if self._sweep is not None:
            if self._sweep_at <= when:
                return
            self._sweep.cancel()
        self._sweep_at = when
        self._sweep = self.loop.call_at(when, self._run)

    def _run(self) -> None:
        self._sweep = None
        now = self.loop.time()
        late_headers = _pop_started_before(self.headers_since, now - self.timeouts.header_timeout_s)
        late_bodies = _pop_started_before(self.body_since, now - self.timeouts.body_timeout_s)
        for connection in late_headers:
            _guarded(connection.headers_timed_out)
        for connection in late_bodies:
            _guarded(connection.body_timed_out)
        upcoming = [since + self.timeouts.header_timeout_s for since in _first(self.headers_since)]
        upcoming += [since + self.timeouts.body_timeout_s for since in _first(self.body_since)]
        if upcoming:
            self._schedule(max(min(upcoming), now + SWEEP_RESOLUTION_S))


def _pop_started_before(clocks: OrderedDict[GuardedHttpProtocol, float], cutoff: float) -> list[GuardedHttpProtocol]:
    expired = []
    while clocks and next(iter(clocks.values())) <= cutoff:
        expired.append(clocks.popitem(last=False)[0])
    return expired


def _first(clocks: OrderedDict[GuardedHttpProtocol, float]) -> list[float]:
    return [next(iter(clocks.values()))] if clocks else []


def _guarded(close: Callable[[], None]) -> None:
    try:
        close()
    except Exception:  # one connection's failure must not stop the sweep that times out the others
        log.exception("closing a late connection failed")


async def _refuse(body: bytes, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
    """The ASGI app that answers a request whose headers are too large: 431, and the connection closed."""
    await send({"type": "http.response.start", "status": 431,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def _timeout_body(message: str) -> bytes:
    return GatewayError(408, message, code="request_timeout").to_bytes()


# Each worker's uvicorn server has its own ServerState, shared by its protocol instances.
_pending: weakref.WeakKeyDictionary[ServerState, PendingConnections] = weakref.WeakKeyDictionary()


class GuardedHttpProtocol(HttpToolsProtocol):
    """HttpToolsProtocol that reports each connection's waits to its worker's PendingConnections."""

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None, *, timeouts: ClientTimeouts) -> None:
        super().__init__(config, server_state, app_state, _loop)
        pending = _pending.get(server_state)
        if pending is None:
            pending = _pending[server_state] = PendingConnections(timeouts, self.loop)
        self.pending = pending
        self.state = FRESH
        # bytes read while a request's headers were incomplete: an upper bound on their size, so only a
        # request near the bound has its headers measured exactly
        self.header_bytes = 0

    # --- uvicorn's callbacks, each extended by where the connection now stands ----------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.pending.wait(self)
        self.pending.start_headers(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.pending.forget(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.state <= IDLE:  # a request's first bytes (later ones are its body, or a pipelined request)
            if self.state == IDLE:
                self.pending.start_headers(self)
            self.state = HEADERS
            self.header_bytes = 0
        if self.state == HEADERS:
            self.header_bytes += len(data)
        super().data_received(data)
        if self.state == HEADERS and self.header_bytes > self.pending.timeouts.max_header_bytes:
            self._refuse_headers(self.url)  # still unfinished, and already past the bound
        # Most requests come whole in one read: only a body still unfinished after it needs a clock.
        if self.state == BODY:
            self.state = BODY_TIMED
            self.pending.start_body(self)

    def on_headers_complete(self) -> None:
        self.state = BODY
        self.pending.headers_complete(self)
        if self.header_bytes > self.pending.timeouts.max_header_bytes and self._header_size() > \
                self.pending.timeouts.max_header_bytes:
            # answered by a refusal in place of the application, as uvicorn answers its own 503s: the body
            # is read past and the connection closed in the usual way
            app, self.app = self.app, functools.partial(_refuse, self._headers_too_large(self.url))
            try:
                super().on_headers_complete()
            finally:
                self.app = app
            return
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        if self.state == BODY_TIMED:
            self.pending.body_complete(self)
        self.state = BUSY
        cycle = self.cycle  # None when a websocket upgrade took over before any request was answered
        if cycle is not None and cycle.response_complete and not self.transport.is_closing():
            # answered before its body had all come (a 413, a route that reads no body): uvicorn's
            # keep-alive timer was cancelled by the body's bytes and is not armed again, so the
            # header clock covers the wait for the next request
            self._wait(FRESH)
            self.pending.start_headers(self)
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # uvicorn armed its keep-alive timer: nothing pipelined is left; and the whole request has come
        if self.timeout_keep_alive_task is not None and self.state == BUSY:
            self._wait(IDLE)

    def handle_websocket_upgrade(self) -> None:
        self.pending.forget(self)  # the connection is the websocket protocol's from here
        self.state = BUSY
        super().handle_websocket_upgrade()

    def _header_size(self) -> int:
        """The request line's target and the headers, as parsed: names, values and a separator each."""
        return len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)

    def _headers_too_large(self, url: bytes) -> bytes:
        """A 431's body, in the error format of the route the request names (Anthropic's on /v1/messages)."""
        error = GatewayError(431, f"The request's headers are larger than this gateway's limit of "
                                  f"{self.pending.timeouts.max_header_bytes} bytes; send fewer or shorter headers, "
                                  f"or raise limits.max_header_bytes in the config.", code="headers_too_large")
        return MESSAGES.error_body(error) if url.startswith((b"/v1/messages", b"/messages")) else error.to_bytes()

    def _refuse_headers(self, url: bytes) -> None:
        """431 for headers still unfinished and already past the bound, then close: what follows on the
        connection cannot be told apart from the rest of them."""
        self._close(self._headers_too_large(url), 431)

    def _wait(self, state: int) -> None:
        self.state = state
        self.pending.wait(self)

    # --- ends, called by PendingConnections ---------------------------------------------------

    def evict(self) -> None:
        """Too many connections wait: this one has waited longest."""
        self._close(self.pending.crowded_out if self.state == HEADERS else None)

    def headers_timed_out(self) -> None:
        # FRESH: nothing was asked, so nothing is answered (as when keep-alive runs out); HEADERS: no
        # response is under way (the connection was waiting), so a 408 cannot interleave with one
        self._close(self.pending.headers_late if self.state == HEADERS else None)

    def body_timed_out(self) -> None:
        cycle = self.cycle
        if cycle.response_started or self.pipeline:
            self._close(None)  # an answer (to this or an earlier request) is under way: only closing is left
            return
        # The application is awaiting the body: it now reads a disconnect, and anything it sends is
        # dropped, so our 408 is the connection's last word.
        cycle.disconnected = True
        cycle.message_event.set()
        self._close(self.pending.body_late)

    def _close(self, answer: bytes | None, status: int = 408) -> None:
        """Answer `status` with `answer` as its body (an error in the application's format), then close."""
        self.pending.forget(self)
        if self.transport.is_closing():
            return
        if answer is not None:
            head = [STATUS_LINE[status]]
            head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
            head += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(answer),
                     b"connection: close\r\n\r\n", answer]
            self.transport.write(b"".join(head))
        self.transport.close()


__all__ = ["ClientTimeouts", "GuardedHttpProtocol", "PendingConnections", "http_protocol"]
