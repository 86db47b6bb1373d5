"""A real OTLP/HTTP trace receiver on loopback: decodes each protobuf export as a collector would."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from support.loopback import serve_on_loopback


@dataclass
class Collector:
    port: int = 0
    spans: list[Span] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@asynccontextmanager
async def collector() -> AsyncIterator[Collector]:
    """An OTLP/HTTP trace receiver: decodes each protobuf export as a collector would."""
    received = Collector()

    async def traces(request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        export = ExportTraceServiceRequest.FromString(await request.read())
        received.headers.append(dict(request.headers))
        for resource_spans in export.resource_spans:
            received.resources.append({a.key: a.value.string_value for a in resource_spans.resource.attributes})
            for scope_spans in resource_spans.scope_spans:
                received.spans.extend(scope_spans.spans)
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    async with serve_on_loopback(app) as port:
        received.port = port
        yield received


def attributes(span: Span) -> dict[str, Any]:
    values = {}
    for a in span.attributes:
        kind = a.value.WhichOneof("value")
        values[a.key] = getattr(a.value, kind)
    return values
