"""Prometheus metrics for GET /metrics, named by the OpenTelemetry GenAI semantic conventions
(gen_ai.client.operation.duration, gen_ai.server.time_to_first_token, gen_ai.server.time_per_output_token,
gen_ai.client.token.usage, with their advised buckets), by upstream and model; plus each journey phase
and the cache's outcome. Updated from the journey sink's thread, never on a request's path.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from firsttoken.journey.attribution import Journey

CONTENT_TYPE = CONTENT_TYPE_LATEST
_LABELS = ("gen_ai_operation_name", "gen_ai_request_model", "firsttoken_upstream")
# Bucket boundaries as the semantic conventions advise them.
_DURATION = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
_TPOT = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
_TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
_PHASE = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
PHASES = ("client_rtt", "gateway", "connect", "rtt", "floor", "queue+prefill", "decode", "e2e")


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.duration = Histogram("gen_ai_client_operation_duration", "Duration of a GenAI operation, received to "
                                  "last byte.", (*_LABELS, "error_type"), unit="seconds", buckets=_DURATION,
                                  registry=self.registry)
        self.ttft = Histogram("gen_ai_server_time_to_first_token", "Time to the first token-bearing event.",
                              _LABELS, unit="seconds", buckets=_TTFT, registry=self.registry)
        self.tpot = Histogram("gen_ai_server_time_per_output_token", "Decode time per output token after the "
                              "first.", _LABELS, unit="seconds", buckets=_TPOT, registry=self.registry)
        self.tokens = Histogram("gen_ai_client_token_usage", "Tokens used per request, by the upstream's count.",
                                (*_LABELS, "gen_ai_token_type"), buckets=_TOKENS, registry=self.registry)
        self.phase = Histogram("firsttoken_journey_phase", "Each journey phase (the journey vocabulary) per request.",
                               ("phase", "firsttoken_upstream"), unit="seconds", buckets=_PHASE,
                               registry=self.registry)
        self.cache = Counter("firsttoken_cache_requests", "Requests by edge-cache outcome.", ("result",),
                             registry=self.registry)

    def observe(self, journey: Journey) -> None:
        model = journey.route.partition("/")[2] or journey.model
        labels = (journey.operation, model, journey.upstream)
        error = "" if journey.status < 400 else str(journey.status)
        p = journey.phases
        self.duration.labels(*labels, error).observe(p.e2e / 1000)
        self.cache.labels("bypass").inc()
        if journey.status >= 400:
            return
        if p.ttft is not None:
            self.ttft.labels(*labels).observe(p.ttft / 1000)
        tokens = journey.output_tokens
        if tokens and tokens > 1 and p.decode:
            self.tpot.labels(*labels).observe(p.decode / 1000 / (tokens - 1))
        if tokens is not None:
            self.tokens.labels(*labels, "output").observe(tokens)
        if journey.input_tokens is not None:
            self.tokens.labels(*labels, "input").observe(journey.input_tokens)
        values = {"client_rtt": p.client_rtt, "gateway": p.gateway, "connect": p.connect, "rtt": p.rtt,
                  "floor": p.floor, "queue+prefill": p.queue_prefill, "decode": p.decode, "e2e": p.e2e}
        for phase, value in values.items():
            if value is not None:
                self.phase.labels(phase, journey.upstream).observe(value / 1000)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
