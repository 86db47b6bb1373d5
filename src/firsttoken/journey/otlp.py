"""OTLP trace export of journeys, when `journeys.otlp` is configured: a span per request and a child
per phase, sent by the OpenTelemetry SDK's batch processor to a collector over OTLP/HTTP.

Spans are made after the fact from the finished timeline (each with its recorded start and end), on
the journey writer's thread: the SDK's span objects cost tens of µs each, which the request's own
path must not pay. Names follow the GenAI semantic conventions (`{operation} {model}`, gen_ai.*).
"""

from __future__ import annotations

import time
from time import perf_counter
from typing import Any

from firsttoken.journey.attribution import Phases
from firsttoken.journey.timeline import Timeline

EXPORT_TIMEOUT_S = 2.0
INSTALL_HINT = "OTLP export needs the OpenTelemetry SDK: pip install 'firsttoken[otlp]'"


class OtlpExporter:
    def __init__(self, endpoint: str, headers: dict[str, str] | None = None, service_name: str = "firsttoken",
                 schedule_delay_s: float = 1.0) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
        except ImportError as exc:  # an optional extra; config validation names it too
            raise RuntimeError(INSTALL_HINT) from exc
        self._kind, self._status, self._code, self._in_context = SpanKind, Status, StatusCode, set_span_in_context
        # Our own provider, not the global one: an application embedding the gateway keeps its own.
        self.provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        # A collector that is down must not hold the gateway's shutdown for long: each export, retries
        # included, gives up after EXPORT_TIMEOUT_S (the SDK's default is 10 s, and 30 s to flush).
        exporter = OTLPSpanExporter(endpoint=endpoint, headers=headers or {}, timeout=EXPORT_TIMEOUT_S)
        self.provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=schedule_delay_s * 1000,
                                                            export_timeout_millis=EXPORT_TIMEOUT_S * 1000))
        self.tracer = self.provider.get_tracer("firsttoken.journey")

    def export(self, timeline: Timeline, p: Phases) -> None:
        """One request as a span tree; its perf_counter() readings placed on the wall clock."""
        offset_ns = time.time_ns() - int(perf_counter() * 1e9)

        def ns(t: float) -> int:
            return int(t * 1e9) + offset_ns

        t = timeline
        end = t.last_byte or perf_counter()
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": t.operation, "gen_ai.request.model": t.model,
            "firsttoken.request_id": t.request_id, "firsttoken.api": t.api,
            "firsttoken.route": t.route, "firsttoken.upstream": t.upstream,
            "firsttoken.tenant": t.tenant, "firsttoken.stream": t.stream, "firsttoken.connection_reused": t.reused,
            "http.response.status_code": t.status,
        }
        if t.output_tokens is not None:
            attributes["gen_ai.usage.output_tokens"] = t.output_tokens
        if t.input_tokens is not None:
            attributes["gen_ai.usage.input_tokens"] = t.input_tokens
        if t.cached_tokens is not None:
            attributes["gen_ai.usage.cache_read.input_tokens"] = t.cached_tokens
        if t.cache_write_tokens:
            attributes["gen_ai.usage.cache_creation.input_tokens"] = t.cache_write_tokens
        if t.reasoning_tokens:
            attributes["firsttoken.usage.reasoning_tokens"] = t.reasoning_tokens
        cost = t.cost
        if cost is not None:
            if cost.usd is not None:
                attributes["firsttoken.cost.usd"] = cost.usd
            if cost.estimated:
                attributes["firsttoken.cost.estimated"] = True
            if cost.saved_by:
                attributes.update({"firsttoken.saved.by": cost.saved_by, "firsttoken.saved.usd": cost.saved_usd,
                                   "firsttoken.saved.tokens": cost.saved_tokens})
        for name, value in (("rtt", p.rtt), ("floor", p.floor), ("client_rtt", p.client_rtt),
                            ("queue_prefill", p.queue_prefill), ("ttft", p.ttft)):
            if value is not None:
                attributes[f"firsttoken.{name}_ms"] = round(value, 3)
        if t.handshake is not None:
            for step, ms in t.handshake.as_dict().items():
                attributes[f"firsttoken.{step}_ms"] = round(ms, 3)
        root = self.tracer.start_span(f"{t.operation} {t.model}".strip(), kind=self._kind.SERVER,
                                      start_time=ns(t.received), attributes=attributes)
        if t.error_code:  # the message has no credentials: they are removed before anything is told
            root.set_attribute("error.type", t.error_code)
            root.set_status(self._status(self._code.ERROR, t.error[:500] or f"HTTP {t.status}"))
        elif t.status >= 400:
            root.set_status(self._status(self._code.ERROR, f"HTTP {t.status}"))
        context = self._in_context(root)
        for name, start, stop in _phase_spans(t, p):
            if stop >= start:  # a decode that came in one read is still a phase, of length 0
                self.tracer.start_span(name, context=context, start_time=ns(start)).end(end_time=ns(stop))
        root.end(end_time=ns(end))

    def close(self) -> None:
        self.provider.shutdown()  # flushes what is batched


def _phase_spans(t: Timeline, p: Phases) -> list[tuple[str, float, float]]:
    """(phase, start, end) on the timeline's clock, in the journey vocabulary's names."""
    spans: list[tuple[str, float, float]] = []
    if t.sent:
        spans.append(("gateway", t.received, t.sent))
        pooled = t.sent + t.pool_ms / 1000.0
        if t.pool_ms:
            spans.append(("pool", t.sent, pooled))
        connected = pooled + t.connect_ms / 1000.0
        if t.connect_ms:
            spans.append(("connect", pooled, connected))
        if t.first_byte:
            spans.append(("ttfb", connected, t.first_byte))
            if p.rtt is not None and p.queue_prefill is not None and t.stream:
                # Half the round trip out, the provider's time, half back: where queue+prefill sits.
                start = connected + p.rtt / 2000.0
                spans.append(("queue+prefill", start, start + p.queue_prefill / 1000.0))
    if t.first_token:
        spans.append(("decode", t.first_token, t.last_token or t.first_token))
    return spans
