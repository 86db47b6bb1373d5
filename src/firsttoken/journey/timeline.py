"""The timeline of one request: monotonic clock reads into a preallocated, slotted object.

Phase names follow the journey vocabulary (DESIGN.md): gateway, cache, connect, ttfb, ttft, e2e.
Recording is a `perf_counter()` call into a slot; nothing is allocated per chunk.
"""

from __future__ import annotations

from time import perf_counter


class Timeline:
    __slots__ = ("received", "cache_ms", "sent", "first_byte", "first_token", "last_byte",
                 "connect_ms", "reused", "token_events", "route", "attempts")

    def __init__(self) -> None:
        self.received = perf_counter()
        self.cache_ms = 0.0
        self.sent = 0.0
        self.first_byte = 0.0
        self.first_token = 0.0
        self.last_byte = 0.0
        self.connect_ms = 0.0
        self.reused = False
        self.token_events = 0  # data events relayed from the first token on (the usage chunk aside)
        self.route = ""
        self.attempts = 0

    def gateway_ms(self) -> float:
        return (self.sent - self.received) * 1000.0 if self.sent else 0.0

    def ttfb_ms(self) -> float:
        return (self.first_byte - self.sent) * 1000.0 if self.first_byte and self.sent else 0.0

    def ttft_ms(self) -> float:
        return (self.first_token - self.received) * 1000.0 if self.first_token else 0.0

    def e2e_ms(self) -> float:
        return ((self.last_byte or perf_counter()) - self.received) * 1000.0

    def server_timing(self) -> str:
        """The `Server-Timing` header value, sent with the response headers."""
        return (f"gateway;dur={self.gateway_ms():.2f}, cache;dur={self.cache_ms:.2f}, "
                f"connect;dur={self.connect_ms:.2f}, ttfb;dur={self.ttfb_ms():.2f}")

    def closing_comment(self) -> bytes:
        """The SSE comment that ends every stream, just before `data: [DONE]`."""
        self.last_byte = perf_counter()
        return f": server-timing ttft;dur={self.ttft_ms():.2f}, e2e;dur={self.e2e_ms():.2f}\n\n".encode()
