"""Prometheus metrics for GET /metrics, named by the OpenTelemetry GenAI semantic conventions
(gen_ai.client.operation.duration, gen_ai.server.time_to_first_token, gen_ai.server.time_per_output_token,
gen_ai.client.token.usage, with their advised buckets), by upstream and model; plus each journey phase
and the cache's outcome. Updated on the event loop as each request ends (instruments.py says why that
is cheap); read at scrape time.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from firsttoken.journey.attribution import Phases
from firsttoken.journey.instruments import CounterFamily, HistogramFamily
from firsttoken.journey.timeline import Timeline

CONTENT_TYPE = CONTENT_TYPE_LATEST
_LABELS = ("gen_ai_operation_name", "gen_ai_request_model", "firsttoken_upstream")
# Bucket boundaries as the semantic conventions advise them.
_DURATION = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
_TPOT = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
_TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
_PHASE = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


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
        for family in (self.duration, self.ttft, self.tpot, self.tokens, self.phase, self.cache):
            self.registry.register(family)

    def observe(self, timeline: Timeline, p: Phases) -> None:
        model = timeline.route.partition("/")[2] or timeline.model
        labels = (timeline.operation, model, timeline.upstream)
        failed = timeline.status >= 400
        self.duration.of(*labels, str(timeline.status) if failed else "").observe(p.e2e / 1000)
        self.cache.inc("bypass")
        if failed:
            return
        if p.ttft is not None:
            self.ttft.of(*labels).observe(p.ttft / 1000)
        tokens = timeline.output_tokens
        if tokens is not None:
            self.tokens.of(*labels, "output").observe(tokens)
            if tokens > 1 and p.decode:
                self.tpot.of(*labels).observe(p.decode / 1000 / (tokens - 1))
        if timeline.input_tokens is not None:
            self.tokens.of(*labels, "input").observe(timeline.input_tokens)
        upstream = timeline.upstream
        # (floor is a constant per upstream and e2e is the duration above: neither needs a histogram)
        for phase, value in (("client_rtt", p.client_rtt), ("gateway", p.gateway), ("connect", p.connect),
                             ("rtt", p.rtt), ("queue+prefill", p.queue_prefill), ("decode", p.decode)):
            if value is not None:
                self.phase.of(phase, upstream).observe(value / 1000)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
