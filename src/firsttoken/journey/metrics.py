"""Prometheus metrics for GET /metrics, named by the OpenTelemetry GenAI semantic conventions
(gen_ai.client.operation.duration, gen_ai.server.time_to_first_token, gen_ai.server.time_per_output_token,
gen_ai.client.token.usage, with their advised buckets), by upstream and model; plus each journey phase
and the cache's outcome. Updated on the event loop as each request ends (instruments.py says why that
is cheap); read at scrape time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from firsttoken.cache.outcome import CacheOutcome
from firsttoken.journey.attribution import Phases
from firsttoken.journey.instruments import CounterFamily, HistogramFamily, Series
from firsttoken.journey.timeline import Timeline

if TYPE_CHECKING:
    from firsttoken.spend.cost import Cost

CONTENT_TYPE = CONTENT_TYPE_LATEST
_LABELS = ("gen_ai_operation_name", "gen_ai_request_model", "firsttoken_upstream")
# Bucket boundaries as the semantic conventions advise them.
_DURATION = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
_TPOT = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
_TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
_PHASE = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


# The metric's labels: the header's words, but "joined" for a request that joined one in flight.
_CACHE_RESULTS = {outcome: "joined" if outcome is CacheOutcome.JOINED else outcome.value for outcome in CacheOutcome}
_PHASES = ("client_rtt", "gateway", "pool", "connect", "rtt", "queue+prefill", "decode")


@dataclass(frozen=True, slots=True)
class _Series:
    """Every series that requests of one operation, route and upstream update."""

    labels: tuple[str, str, str]
    duration: Series
    ttft: Series
    tpot: Series
    output_tokens: Series
    input_tokens: Series
    client_rtt: Series
    gateway: Series
    pool: Series
    connect: Series
    rtt: Series
    queue_prefill: Series
    decode: Series


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.duration = HistogramFamily("gen_ai_client_operation_duration_seconds", "Duration of a GenAI "
                                        "operation, received to last byte.", (*_LABELS, "error_type"), _DURATION)
        self.ttft = HistogramFamily("gen_ai_server_time_to_first_token_seconds", "Time to the first "
                                    "token-bearing event.", _LABELS, _TTFT)
        self.tpot = HistogramFamily("gen_ai_server_time_per_output_token_seconds", "Decode time per output "
                                    "token after the first.", _LABELS, _TPOT)
        self.tokens = HistogramFamily("gen_ai_client_token_usage", "Tokens used per request, by the upstream's "
                                      "count.", (*_LABELS, "gen_ai_token_type"), _TOKENS)
        self.phase = HistogramFamily("firsttoken_journey_phase_seconds", "Each journey phase (the journey "
                                     "vocabulary) per request.", ("phase", "firsttoken_upstream"), _PHASE)
        self.cache = CounterFamily("firsttoken_cache_requests", "Requests by edge-cache outcome.", ("result",))
        self.prompt_cached = CounterFamily("firsttoken_upstream_cached_input_tokens", "Input tokens the "
                                           "upstream's own prompt cache served, by its usage counts.", _LABELS)
        # Spend, by client key and route: what went upstream (its tokens by kind, and the money) and what the
        # edge saved (cache hits, joined requests, tasks sized down).
        self.usd = CounterFamily("firsttoken_cost_usd", "USD requests cost upstream, by the price table.",
                                 ("firsttoken_key", "firsttoken_route"))
        self.spent_tokens = CounterFamily("firsttoken_tokens", "Tokens requests used upstream, by kind: input, "
                                          "cached_input, cache_write (of the input), output, reasoning (of the "
                                          "output).", ("firsttoken_key", "firsttoken_route", "gen_ai_token_type"))
        self.saved_usd = CounterFamily("firsttoken_saved_usd", "USD the edge saved requests.",
                                       ("firsttoken_key", "firsttoken_route", "saved_by"))
        self.saved_tokens = CounterFamily("firsttoken_saved_tokens", "Tokens the edge kept from upstreams.",
                                          ("firsttoken_key", "firsttoken_route", "saved_by"))
        for family in (self.duration, self.ttft, self.tpot, self.tokens, self.phase, self.cache, self.prompt_cached,
                       self.usd, self.spent_tokens, self.saved_usd, self.saved_tokens):
            self.registry.register(family)
        # The series one kind of request updates, found with one lookup: looking each up by its labels
        # cost more than the rest of the journey's accounting (54 k instructions a request, counted).
        self._series: dict[tuple[str, str, str, str], _Series] = {}

    def observe(self, timeline: Timeline, p: Phases) -> None:
        key = (timeline.operation, timeline.route, timeline.model, timeline.upstream)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = self._series_for(timeline)
        self.cache.inc(_CACHE_RESULTS[timeline.cache])
        if timeline.cost is not None:
            self._spent(timeline, timeline.cost)
        error = str(timeline.status) if timeline.status >= 400 else timeline.error_code  # a stream broken after 200
        if error:
            self.duration.of(*series.labels, error).observe(p.e2e / 1000)
            return
        series.duration.observe(p.e2e / 1000)
        if p.ttft is not None:
            series.ttft.observe(p.ttft / 1000)
        tokens = timeline.output_tokens
        if tokens is not None:
            series.output_tokens.observe(tokens)
            if tokens > 1 and p.decode:
                series.tpot.observe(p.decode / 1000 / (tokens - 1))
        if timeline.input_tokens is not None:
            series.input_tokens.observe(timeline.input_tokens)
        if timeline.cached_tokens:
            self.prompt_cached.add(timeline.cached_tokens, *series.labels)
        # (floor is a constant per upstream and e2e is the duration above: neither needs a histogram)
        series.gateway.observe(p.gateway / 1000)
        series.connect.observe(p.connect / 1000)
        if p.pool:  # most requests find a free connection: a zero each would only bury the ones that waited
            series.pool.observe(p.pool / 1000)
        if p.client_rtt is not None:
            series.client_rtt.observe(p.client_rtt / 1000)
        if p.rtt is not None:
            series.rtt.observe(p.rtt / 1000)
        if p.queue_prefill is not None:
            series.queue_prefill.observe(p.queue_prefill / 1000)
        if p.decode is not None:
            series.decode.observe(p.decode / 1000)

    def _series_for(self, timeline: Timeline) -> _Series:
        model = timeline.route.partition("/")[2] or timeline.model
        labels = (timeline.operation, model, timeline.upstream)
        phase = {name.replace("+", "_"): self.phase.of(name, timeline.upstream) for name in _PHASES}
        return _Series(labels, self.duration.of(*labels, ""), self.ttft.of(*labels), self.tpot.of(*labels),
                       self.tokens.of(*labels, "output"), self.tokens.of(*labels, "input"), **phase)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def _spent(self, timeline: Timeline, cost: Cost) -> None:
        key, route = timeline.tenant, timeline.route
        if cost.usd:
            self.usd.add(cost.usd, key, route)
        tokens = cost.tokens
        if tokens is not None:
            for kind, count in (("input", tokens.input), ("cached_input", tokens.cached_input),
                                ("cache_write", tokens.cache_write), ("output", tokens.output),
                                ("reasoning", tokens.reasoning)):
                if count:
                    self.spent_tokens.add(count, key, route, kind)
        if cost.saved_by:
            self.saved_usd.add(cost.saved_usd, key, route, cost.saved_by)
            self.saved_tokens.add(cost.saved_tokens, key, route, cost.saved_by)
