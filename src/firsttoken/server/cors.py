"""CORS, for web apps that call the gateway from a browser: off unless `cors.origins` lists the origins
allowed (or "*"). An allowed origin's requests get `Access-Control-Allow-Origin` and can read the
journey's headers (Server-Timing and the x-firsttoken ones); its preflight (`OPTIONS` with
`Access-Control-Request-Method`) is answered at once, without authentication, as browsers send it
without credentials. A request from an origin not listed gets no CORS headers: the browser blocks it."""

from __future__ import annotations

from collections.abc import Sequence

from firsttoken.server.http import Headers, Scope, Send, header

# What a browser app may read of a response besides the simple headers: the X-ray and the request id.
_EXPOSED = b"server-timing, x-request-id, x-firsttoken-route, x-firsttoken-cache, x-firsttoken-size, retry-after"
_METHODS = b"GET, POST, OPTIONS"
_MAX_AGE = b"600"  # seconds a browser may reuse a preflight's answer


class Cors:
    def __init__(self, origins: Sequence[str]) -> None:
        self.any = "*" in origins
        self.origins = {origin.rstrip("/").encode() for origin in origins}

    def allowed(self, scope: Scope) -> bytes | None:
        """The request's Origin when it may be answered with CORS headers; None otherwise."""
        origin = header(scope, b"origin")
        if origin is None or not (self.any or origin in self.origins):
            return None
        return origin

    def headers(self, origin: bytes) -> Headers:
        """For every response to an allowed origin."""
        return [(b"access-control-allow-origin", b"*" if self.any else origin), (b"vary", b"Origin"),
                (b"access-control-expose-headers", _EXPOSED)]

    async def preflight(self, scope: Scope, send: Send, origin: bytes) -> None:
        """The answer to a preflight: the methods, and the headers the browser asked to send."""
        asked = header(scope, b"access-control-request-headers") or b"authorization, content-type"
        headers = [*self.headers(origin), (b"access-control-allow-methods", _METHODS),
                   (b"access-control-allow-headers", asked), (b"access-control-max-age", _MAX_AGE),
                   (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


def is_preflight(scope: Scope) -> bool:
    return scope["method"] == "OPTIONS" and header(scope, b"access-control-request-method") is not None
