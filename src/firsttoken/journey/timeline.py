"""The timeline of one request: monotonic clock reads and a few facts, in a slotted object made once
per request.

Phase names follow the journey vocabulary (docs/contracts.md): gateway, cache, connect, ttfb, ttft, itl, e2e,
rtt, floor, queue+prefill, decode. Recording is a `perf_counter()` into a slot; nothing is allocated
per chunk (token events are counted, and only the largest gap between them is kept).
"""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING

from firsttoken.cache.outcome import CacheOutcome
from firsttoken.journey.server_timing import beyond_socket_ms, parse_server_timing
from firsttoken.journey.tcp_info import Rtt
from firsttoken.upstream.connector import Handshake

if TYPE_CHECKING:
    from firsttoken.spend.cost import Cost, Pricing
    from firsttoken.spend.usage import Tokens

_NOTHING_DECLARED: dict[str, float] = {}  # shared, never written: most timelines' upstream declares nothing


class Timeline:
    __slots__ = ("request_id", "operation", "api", "tenant", "model", "stream", "status", "received", "cache_ms",
                 "sent", "first_byte", "first_token", "last_token", "last_byte", "max_gap", "pool_ms", "connect_ms",
                 "reused", "token_events", "output_tokens", "input_tokens", "cached_tokens", "cache_write_tokens",
                 "cache_write_1h_tokens", "reasoning_tokens", "prompt_estimate", "reused_tokens", "sized_from",
                 "sharing", "pricing", "cost", "budget_hold",
                 "route", "upstream", "attempts", "client_rtt", "upstream_rtt", "upstream_timing", "declared",
                 "floor_ms", "handshake", "cache", "similarity", "hedge", "raced", "error_code", "error")

    def __init__(self, request_id: str = "") -> None:
        self.received = perf_counter()
        self.request_id = request_id
        self.tenant = ""
        self.model = ""
        self.stream = False
        self.status = 0
        self.cache_ms = 0.0
        self.cache = CacheOutcome.BYPASS  # what the edge cache did (x-firsttoken-cache)
        self.similarity: float | None = None  # a semantic hit's
        self.sent = 0.0
        self.first_byte = 0.0
        self.first_token = 0.0
        self.last_token = 0.0
        self.last_byte = 0.0
        self.max_gap = 0.0  # the longest wait between two reads that carried tokens (s)
        self.pool_ms = 0.0  # waiting for a free upstream connection (every one the pool may hold was busy)
        self.connect_ms = 0.0  # DNS + TCP + TLS of a new upstream connection; 0 when one was reused
        self.handshake: Handshake | None = None  # how that new connection opened, step by step
        self.reused = False
        self.token_events = 0  # data events relayed from the first token on (the usage chunk aside)
        self.output_tokens: int | None = None  # the upstream's usage counts, when it gave them
        self.input_tokens: int | None = None
        self.cached_tokens: int | None = None  # of the input, what the provider's prompt cache served
        self.cache_write_tokens: int | None = None  # of the input, what was written to that cache
        self.cache_write_1h_tokens: int | None = None  # …of which to be kept an hour (priced higher)
        self.reasoning_tokens: int | None = None  # of the output, what the model spent thinking
        self.prompt_estimate = 0  # the prompt's tokens by the gateway's estimate: when the upstream gives no usage
        self.reused_tokens: Tokens | None = None  # a cache hit's or a joined request's: the answer's own usage
        self.sized_from = ""  # a request sized down: the route its model would have taken unsized
        self.sharing = 1  # requests in flight on its target when it was sent, itself included
        self.pricing: Pricing | None = None  # the gateway's prices, to cost it (spend/cost.py)
        self.cost: Cost | None = None  # once costed: what it cost and saved
        self.budget_hold = 0.0  # USD its key's budget holds for it until it is costed
        self.operation = "chat"  # the GenAI operation: chat | embeddings
        self.api = "chat"  # the API the client spoke: chat | messages | responses | embeddings
        self.route = ""
        self.upstream = ""
        self.attempts = 0
        self.client_rtt: Rtt | None = None  # the client's TCP connection, from the kernel
        self.upstream_rtt: Rtt | None = None  # the upstream connection this request used
        self.upstream_timing: str | None = None  # the upstream's own Server-Timing, as it sent it
        self.declared = _NOTHING_DECLARED  # …and read: phase → ms
        self.floor_ms: float | None = None  # the physics floor to the route's upstream, when both ends are known
        self.hedge = b""  # when a second target raced the first: "; hedge-of=<the first>" or "; hedged-by=<the second>"
        self.raced = ""  # a semantic hit found after the request left: the route of the upstream request it cancelled
        # How the request failed, when it did: an error answered, or a stream that broke or was cut after
        # its 200 went out. The message is what the client was told (no credentials: those are removed first).
        self.error_code = ""
        self.error = ""

    # What one upstream attempt records; a hedge records them on a timeline of its own, adopted if it wins.
    _ATTEMPT = ("sent", "first_byte", "first_token", "last_token", "max_gap", "pool_ms", "connect_ms", "handshake",
                "reused", "token_events", "sharing", "route", "upstream", "upstream_rtt", "upstream_timing", "declared",
                "floor_ms", "error_code", "error")

    def for_hedge(self) -> Timeline:
        """A timeline for a second attempt at this request, to race the first."""
        twin = Timeline(self.request_id)
        twin.received, twin.tenant, twin.model, twin.stream = self.received, self.tenant, self.model, self.stream
        twin.prompt_estimate, twin.pricing = self.prompt_estimate, self.pricing
        return twin

    def adopt(self, hedge: Timeline) -> None:
        """The hedge won: its attempt is this request's."""
        for name in self._ATTEMPT:
            setattr(self, name, getattr(hedge, name))
        self.attempts += hedge.attempts

    def failed(self, code: str, message: str) -> None:
        """The request failed (the first failure that reached the client is kept)."""
        if not self.error_code:
            self.error_code, self.error = code, message

    def tokens_at(self, now: float) -> None:
        """A read that carried token events arrived at `now` (after the first token)."""
        gap = now - (self.last_token or self.first_token)
        if gap > self.max_gap:
            self.max_gap = gap
        self.last_token = now

    def upstream_said(self, server_timing: str | None) -> None:
        """The Server-Timing the upstream answered with: kept as sent, and read once for the phases."""
        self.upstream_timing = server_timing
        self.declared = parse_server_timing(server_timing) if server_timing else _NOTHING_DECLARED

    def gateway_ms(self) -> float:
        return (self.sent - self.received) * 1000.0 if self.sent else 0.0

    def opened(self, handshake: Handshake | None) -> None:
        """The upstream connection this request used: new (how it opened) or reused (None)."""
        self.handshake = handshake
        self.reused = handshake is None
        self.connect_ms = handshake.total_ms if handshake is not None else 0.0

    def ttfb_ms(self) -> float:
        """Request sent upstream → first response byte: after any wait for a free connection, and the
        handshakes when a connection opened."""
        if not (self.first_byte and self.sent):
            return 0.0
        return max((self.first_byte - self.sent) * 1000.0 - self.pool_ms - self.connect_ms, 0.0)

    def ttft_ms(self) -> float:
        return (self.first_token - self.received) * 1000.0 if self.first_token else 0.0

    def decode_ms(self) -> float:
        return ((self.last_token or self.first_token) - self.first_token) * 1000.0 if self.first_token else 0.0

    def e2e_ms(self) -> float:
        return ((self.last_byte or perf_counter()) - self.received) * 1000.0

    def rtt_ms(self) -> float | None:
        """The round trip to the model: the socket's, and what the upstream declares lies beyond it (a
        simulated region's distance, a gateway's own round trip to its upstream)."""
        if self.upstream_rtt is None:
            return None
        measured = self.upstream_rtt.best_ms
        return measured + beyond_socket_ms(self.declared) if self.declared else measured

    def server_timing(self) -> str:
        """The `Server-Timing` header value, sent with the response headers: what is known by then."""
        # One %-format for the four always sent: a quarter cheaper than an f-string's four format specs.
        timing = "gateway;dur=%.2f, cache;dur=%.2f, connect;dur=%.2f, ttfb;dur=%.2f" % (  # noqa: UP031 (measured)
            self.gateway_ms(), self.cache_ms, self.connect_ms, self.ttfb_ms())
        if self.handshake is not None:
            h = self.handshake
            timing += f", dns;dur={h.dns_ms:.2f}, tcp;dur={h.tcp_ms:.2f}, tls;dur={h.tls_ms:.2f}"
        if self.pool_ms:
            timing += f", pool;dur={self.pool_ms:.2f}"
        rtt = self.rtt_ms()
        if rtt is not None:
            timing += f", rtt;dur={rtt:.2f}"
        if self.floor_ms is not None:
            timing += f", floor;dur={self.floor_ms:.2f}"
        if self.client_rtt is not None:
            timing += f", client-rtt;dur={self.client_rtt.smoothed_ms:.2f}"
        cold = self.declared.get("cold")
        if cold:  # the upstream's cold start, so that whoever reads this header can name it too
            timing += f", cold;dur={cold:.2f}"
        return timing

    def costed(self) -> Cost:
        """What it cost and saved, worked out once, when it is first said (a whole answer's header, a stream's
        closing comment) or at its end: the client and the ledger are told the same figure."""
        if self.cost is None:
            assert self.pricing is not None, "only a priced request is costed"
            self.cost = self.pricing.cost(self)
        return self.cost

    def closing_comment(self) -> bytes:
        """The SSE comment that ends every stream, just before `data: [DONE]`: the timings, and what the
        request cost (the x-firsttoken-cost header a whole answer carries)."""
        self.last_byte = perf_counter()
        comment = (b": server-timing ttft;dur=%.2f, e2e;dur=%.2f, decode;dur=%.2f\n"
                   % (self.ttft_ms(), self.e2e_ms(), self.decode_ms()))
        if self.pricing is not None:
            comment += b": x-firsttoken-cost " + self.costed().header() + b"\n"
        return comment + b"\n"
