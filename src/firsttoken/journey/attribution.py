"""Where a request's time went: the timeline turned into the journey vocabulary's phases (docs/contracts.md)
and a verdict in plain words.

The phases are arithmetic on the timeline, computed once as the request ends (for the metrics and the
log); the verdict and the rest of a Journey only when someone asks (GET /v1/journeys).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from firsttoken.cache.outcome import CacheOutcome
from firsttoken.journey.timeline import Timeline


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs a setattr call per field, per request
class Phases:
    """Milliseconds; None where this request cannot know (no TCP socket, no location, no tokens)."""

    client_rtt: float | None
    gateway: float
    cache: float
    pool: float  # waiting for a free upstream connection
    connect: float
    ttfb: float
    rtt: float | None
    floor: float | None
    distance_tax: float | None
    queue_prefill: float | None
    ttft: float | None
    decode: float | None
    e2e: float


@dataclass(frozen=True)
class Journey:
    request_id: str
    operation: str
    tenant: str
    model: str
    route: str
    upstream: str
    stream: bool
    status: int
    attempts: int
    reused_connection: bool
    phases: Phases
    output_tokens: int | None
    input_tokens: int | None
    cached_input_tokens: int | None  # of the input, what the provider's prompt cache served
    token_events: int
    tokens_per_s: float | None
    itl_max_ms: float | None
    upstream_timing: dict[str, float] = field(default_factory=dict)
    handshake: dict[str, float] | None = None  # dns, tcp, tls (ms) of a connection opened for this request
    cache: str = "bypass"  # the edge cache's outcome: bypass | miss | hit
    hedge: str = ""  # "hedge-of=<the first target>" when a hedge won, "hedged-by=<the hedge>" when it lost
    error: dict[str, str] | None = None  # {"code", "message"}: an error answered, or a stream broken after its 200
    api: str = "chat"  # the API the client spoke: chat | messages | responses | embeddings
    cost: dict[str, Any] | None = None  # what it cost and what the edge saved it (spend/cost.py's Cost.as_dict)
    verdict: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["phases"]
        return {**data, "phases": phases_on_the_wire(self.phases),
                "tokens_per_s": round_ms(self.tokens_per_s), "itl_max_ms": round_ms(self.itl_max_ms)}


def round_ms(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def phases_on_the_wire(p: Phases) -> dict[str, float | None]:
    """The phases as a journey's JSON names them (docs/contracts.md), to a hundredth of a ms."""
    return {"client_rtt": round_ms(p.client_rtt), "gateway": round_ms(p.gateway), "cache": round_ms(p.cache),
            "pool": round_ms(p.pool), "connect": round_ms(p.connect), "ttfb": round_ms(p.ttfb),
            "rtt": round_ms(p.rtt), "floor": round_ms(p.floor), "ttft": round_ms(p.ttft),
            "decode": round_ms(p.decode), "e2e": round_ms(p.e2e), "queue+prefill": round_ms(p.queue_prefill),
            "distance tax": round_ms(p.distance_tax)}


def phases(timeline: Timeline) -> tuple[Phases, float | None, dict[str, float]]:
    """The phases; the provider's whole time (ttfb − rtt); the upstream's own Server-Timing."""
    upstream_timing = timeline.declared
    rtt = timeline.rtt_ms()  # with what lies beyond the socket: a simulated region's distance, a gateway's leg
    gateway, cache, pool, connect = timeline.gateway_ms(), timeline.cache_ms, timeline.pool_ms, timeline.connect_ms
    ttfb = timeline.ttfb_ms()
    if "gateway" in upstream_timing:  # a firsttoken gateway in front (a trace through one): its work is its own
        hop = [upstream_timing.get(name, 0.0) for name in ("gateway", "cache", "pool", "connect")]
        gateway, cache, pool, connect = gateway + hop[0], cache + hop[1], pool + hop[2], connect + hop[3]
        ttfb = max(ttfb - hop[0] - hop[2] - hop[3], 0.0)
    # What the provider spent: all of it before the first byte of a stream; a whole answer's first byte
    # comes after its generation too, which only the provider's own Server-Timing can tell apart.
    provider = max(ttfb - rtt, 0.0) if rtt is not None and timeline.first_byte else None
    # A gateway in front knows the floor from where it stands, when the caller does not know its own.
    floor = timeline.floor_ms if timeline.floor_ms is not None else upstream_timing.get("floor")
    if timeline.stream:
        queue_prefill = provider
        decode = timeline.decode_ms() if timeline.first_token else None
    else:
        declared = [upstream_timing[k] for k in ("queue", "cold", "prefill") if k in upstream_timing]
        queue_prefill = min(sum(declared), provider) if declared and provider is not None else None
        decode = provider - queue_prefill if queue_prefill is not None and provider is not None else None
    # Positional: with keywords the slotted __init__ matches 13 names, 2.7× the cost of the call (timeit).
    result = Phases(
        timeline.client_rtt.smoothed_ms if timeline.client_rtt is not None else None,  # client_rtt
        gateway, cache, pool, connect, ttfb, rtt, floor,
        rtt - floor if rtt is not None and floor is not None else None,  # distance_tax
        queue_prefill, timeline.ttft_ms() if timeline.first_token else None, decode, timeline.e2e_ms())
    return result, provider, upstream_timing


def tokens_per_s(timeline: Timeline, p: Phases) -> float | None:
    tokens = timeline.output_tokens if timeline.output_tokens is not None else (timeline.token_events or None)
    return tokens / (p.decode / 1000.0) if tokens and p.decode and tokens > 1 else None


def attribute(timeline: Timeline) -> Journey:
    p, provider, upstream_timing = phases(timeline)
    rate = tokens_per_s(timeline, p)
    itl_max = timeline.max_gap * 1000.0 if timeline.token_events > 1 else None
    journey = Journey(timeline.request_id, timeline.operation, timeline.tenant, timeline.model, timeline.route,
                      timeline.upstream, timeline.stream, timeline.status, timeline.attempts, timeline.reused, p,
                      timeline.output_tokens, timeline.input_tokens, timeline.cached_tokens, timeline.token_events,
                      rate, itl_max,
                      upstream_timing, timeline.handshake.as_dict() if timeline.handshake is not None else None,
                      timeline.cache.header(timeline.similarity).decode(), timeline.hedge.decode().removeprefix("; "),
                      {"code": timeline.error_code, "message": timeline.error} if timeline.error_code else None,
                      timeline.api, timeline.cost.as_dict() if timeline.cost is not None else None)
    return Journey(**{**journey.__dict__, "verdict": verdict(journey, provider)})


def verdict(journey: Journey, provider_ms: float | None = None) -> str:
    """The largest part of the wait, in words, and the generation's pace. `provider_ms` is the provider's
    whole time when its queue and prefill cannot be told from its generation (a non-streaming answer)."""
    p = journey.phases
    if journey.status >= 400:
        return f"failed with HTTP {journey.status} after {p.e2e:.0f} ms"
    if journey.error is not None:
        return f"broken: the answer began but did not end well ({journey.error['code']}) after {p.e2e:.0f} ms"
    if journey.cache == CacheOutcome.HIT.value:
        return f"answered from the edge cache in {p.e2e:.1f} ms, without crossing to the upstream"
    if journey.cache.startswith(CacheOutcome.SEMANTIC_HIT.value):
        similarity = journey.cache.rpartition("=")[2]
        return (f"answered from the edge cache in {p.e2e:.1f} ms: a question asked before in other words "
                f"(similarity {similarity})")
    if journey.cache == CacheOutcome.JOINED.value:
        return f"joined an identical request already in flight: {p.e2e:.0f} ms, one upstream request for both"
    if journey.hedge.startswith("hedge-of="):  # the wait before the hedge went out is in `gateway`
        first = journey.hedge.removeprefix("hedge-of=")
        words = (f"{first} was slow to its first token: after {p.gateway:.0f} ms a hedge raced {journey.route}, "
                 f"which answered first")
        return words + _generation(journey)
    cold = journey.upstream_timing.get("cold", 0.0)
    parts = {
        "client": p.client_rtt or 0.0,
        "gateway": p.gateway,
        "pool": p.pool,
        "handshakes": p.connect,
        "distance": p.rtt or 0.0,
        "queue": p.queue_prefill or 0.0,
        "provider": provider_ms if p.queue_prefill is None and provider_ms else 0.0,
    }
    largest = max(parts, key=parts.__getitem__) if any(parts.values()) else None
    if cold and cold >= 0.5 * (p.queue_prefill or 0.0) and cold >= 200:
        words = f"a cold start: {cold / 1000:.1f} s before the first token"
    elif largest == "client":
        words = f"your own connection added {p.client_rtt:.0f} ms"
    elif largest == "distance":
        floor = f", {p.floor:.0f} ms of it the speed of light in fibre" if p.floor is not None else ""
        words = f"most of this wait was distance: a {p.rtt:.0f} ms round trip{floor}"
    elif largest == "pool":
        words = (f"most of this wait was for a free connection to {journey.upstream}: {p.pool:.0f} ms, every one its "
                 f"pool may hold was busy (raise upstreams.{journey.upstream}.pool.max)")
    elif largest == "handshakes":
        words = f"a new connection cost {p.connect:.0f} ms of handshakes"
    elif largest == "queue":
        words = f"most of this wait was the provider's queue and prefill: {p.queue_prefill:.0f} ms"
    elif largest == "provider":
        words = (f"most of this wait was the provider: {provider_ms:.0f} ms of queue, prefill and generation "
                 f"(stream to see them apart)")
    elif largest == "gateway":
        words = f"most of this wait was the gateway itself: {p.gateway:.1f} ms"
    else:  # nothing measured beyond the total (no TCP socket to read, no first byte)
        words = f"{p.e2e:.0f} ms from request to last byte"
    return words + _generation(journey)


def _generation(journey: Journey) -> str:
    """"; generation: 64 tokens at 123 tok/s", and what the provider's prompt cache served, when known."""
    words = ""
    tokens = journey.output_tokens or journey.token_events
    if journey.tokens_per_s and tokens:
        words += f"; generation: {tokens} tokens at {journey.tokens_per_s:.0f} tok/s"
    if journey.cached_input_tokens and journey.input_tokens:
        words += (f"; the provider's prompt cache served {journey.cached_input_tokens} of "
                  f"{journey.input_tokens} input tokens")
    return words
