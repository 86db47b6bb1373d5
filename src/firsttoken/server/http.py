"""Small ASGI helpers: reading a bounded body, sending JSON and SSE responses.

The gateway speaks raw ASGI rather than through a framework's Request/Response objects: on this
hot path they cost about a fifth of the throughput (measured: docs/architecture.md, "Raw ASGI") and
we need none of their features beyond what these few functions do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from firsttoken.errors import GatewayError
from firsttoken.journey.timeline import Timeline

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

JSON = (b"content-type", b"application/json")
SSE_HEADERS: Headers = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # tells nginx and similar proxies in front of us not to buffer
]


def response_headers(base: Headers, timeline: Timeline) -> Headers:
    """The headers of every gateway response (docs/contracts.md): request id, Server-Timing, cache, route."""
    return [*base, (b"server-timing", timeline.server_timing().encode()),
            (b"x-firsttoken-route", (timeline.route.encode() + timeline.hedge) if timeline.route else b"none"),
            (b"x-firsttoken-cache", timeline.cache.header(timeline.similarity))]


class ClientDisconnected(Exception):
    """The client went away while we were still reading its request."""


class ClientStalled(Exception):
    """The client stopped reading its response; holding its upstream stream open would leak it."""


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return value
    return None


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    message = await receive()
    if message["type"] == "http.disconnect":
        raise ClientDisconnected
    body = message.get("body", b"")
    if not message.get("more_body"):
        if len(body) > limit:
            raise too_large(limit)
        return body
    parts = [body]
    size = len(body)
    while message.get("more_body"):
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        parts.append(chunk)
    return b"".join(parts)


def too_large(limit: int) -> GatewayError:
    return GatewayError(413, f"The request body is larger than this gateway's limit of {limit} bytes; "
                             f"send less, or raise limits.max_body_bytes in the config.",
                        code="request_too_large")


async def send_bytes(send: Send, status: int, body: bytes, headers: Headers,
                     content_type: tuple[bytes, bytes] = JSON) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [content_type, *headers]})
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, payload: Any, headers: Headers) -> None:
    await send_bytes(send, status, orjson.dumps(payload), headers)


async def send_error(send: Send, error: GatewayError, headers: Headers,
                     render: Callable[[GatewayError], bytes] = GatewayError.to_bytes) -> None:
    """An error response; `render` gives its body in the route's format (OpenAI's by default)."""
    extra = [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
    await send_bytes(send, error.status, render(error), headers + extra)
