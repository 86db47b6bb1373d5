"""OTLP export: with `journeys.otlp` set, every journey reaches a real OTLP/HTTP receiver as a span tree
(a SERVER span per request, a child per phase, inside it), with the configured headers; a collector that
is down costs the clients nothing."""

from __future__ import annotations

import signal
import time

import openai
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from pydantic import ValidationError

from conftest import UPSTREAM_KEY
from firsttoken.config import Otlp
from support.gateway_process import GatewayProcess, free_port
from support.otlp_collector import attributes, collector
from support.threaded import InThread
from support.waiting import wait_until

USER = [{"role": "user", "content": "hello there"}]
COLLECTOR_KEY = "otlp-ingest-key-98765"


def settings(upstream_url: str, otlp_url: str) -> dict:
    # every request must cross to the upstream: the edge cache (on by default) has its own tests
    return {"cache": False, "upstreams": {"fake": {"url": upstream_url, "key": UPSTREAM_KEY}},
            "journeys": {"log": None, "otlp": {"endpoint": otlp_url, "service_name": "edge-lagos",
                                               "headers": {"x-ingest-key": COLLECTOR_KEY}}}}


def test_every_journey_is_a_span_tree_at_the_collector(tmp_path, upstream) -> None:
    with InThread(collector) as received, GatewayProcess(settings(upstream.url, received.url), tmp_path) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="none", max_retries=0)
        took: dict[str, float] = {}  # each request's whole time, as its client saw it
        started, wall_started = time.perf_counter(), time.time()
        streamed = client.chat.completions.with_raw_response.create(model="fake/echo", messages=USER, stream=True)
        for _ in streamed.parse():
            pass
        took[streamed.headers["x-request-id"]] = time.perf_counter() - started
        started = time.perf_counter()
        whole = client.chat.completions.with_raw_response.create(model="fake/echo", messages=USER)
        took[whole.headers["x-request-id"]] = time.perf_counter() - started
        wall_ended = time.time()
        stream_id = streamed.headers["x-request-id"]
        request_ids = {stream_id, whole.headers["x-request-id"]}
        roots = lambda: [s for s in received.spans if not s.parent_span_id]  # noqa: E731
        wait_until(lambda: len(roots()) >= 2, "both requests' root spans at the collector")
        log = gateway.log()

    by_request = {attributes(s)["firsttoken.request_id"]: s for s in roots()}
    assert set(by_request) == request_ids
    assert {r["service.name"] for r in received.resources} == {"edge-lagos"}
    assert all(h.get("x-ingest-key") == COLLECTOR_KEY for h in received.headers)
    assert COLLECTOR_KEY not in log

    for request_id, root in by_request.items():
        facts = attributes(root)
        assert root.name == "chat fake/echo" and root.kind == Span.SPAN_KIND_SERVER
        assert facts["gen_ai.operation.name"] == "chat" and facts["gen_ai.request.model"] == "fake/echo"
        assert facts["firsttoken.upstream"] == "fake" and facts["http.response.status_code"] == 200
        assert facts["gen_ai.usage.output_tokens"] > 0
        children = [s for s in received.spans if s.parent_span_id == root.span_id]
        names = [c.name for c in children]
        assert {"gateway", "ttfb"} <= set(names), names
        assert ("decode" in names) == (request_id == stream_id), names  # a whole answer has no token times
        for child in children:
            assert child.trace_id == root.trace_id
            assert root.start_time_unix_nano <= child.start_time_unix_nano <= child.end_time_unix_nano
            assert child.end_time_unix_nano <= root.end_time_unix_nano, (child.name, facts)
        # The phases follow each other in the order the journey lived them.
        starts = {c.name: c.start_time_unix_nano for c in children}
        assert starts["gateway"] <= starts["ttfb"] <= starts.get("decode", starts["ttfb"])
        # A root lasts what the request lasted (no longer than its client waited for it), on the wall clock
        # of when it was asked (a ms of slack: the span's clock is the gateway's perf_counter, moved)
        assert 0 < root.end_time_unix_nano - root.start_time_unix_nano <= took[request_id] * 1e9
        assert wall_started - 1e-3 <= root.start_time_unix_nano / 1e9 <= wall_ended + 1e-3


def test_a_collector_that_is_down_costs_the_clients_nothing(tmp_path, upstream) -> None:
    absent = f"http://127.0.0.1:{free_port()}"
    with GatewayProcess(settings(upstream.url, absent), tmp_path) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="none", max_retries=0)
        for _ in range(3):
            reply = client.chat.completions.create(model="fake/echo", messages=USER)
            assert reply.choices[0].message.content
        # an export attempt has failed (the exporter says so in the log)
        wait_until(lambda: "opentelemetry.exporter" in gateway.log(), "a failed export in the gateway's log")
    # The spans it could not send do not hold the shutdown: each export gives up after EXPORT_TIMEOUT_S,
    # so the gateway stopped on its own after SIGTERM, and was not killed when terminate() ran out of
    # patience (10 s, five times that timeout; the SDK's own defaults would hold it 10 to 30 s).
    assert gateway.process is not None and gateway.process.returncode != -signal.SIGKILL
    assert COLLECTOR_KEY not in gateway.log()


def test_the_endpoint_is_a_collector_url() -> None:
    assert Otlp(endpoint="http://collector:4318").endpoint == "http://collector:4318/v1/traces"
    assert Otlp(endpoint="https://api.example.com/otlp/v1/traces").endpoint.endswith("/otlp/v1/traces")
    with pytest.raises(ValidationError, match="OTLP/HTTP collector"):
        Otlp(endpoint="collector:4318")
    assert COLLECTOR_KEY not in repr(Otlp(endpoint="http://c:4318", headers={"k": COLLECTOR_KEY}))


def test_a_broken_stream_is_an_error_span_without_the_upstream_key(tmp_path, upstream) -> None:
    with InThread(collector) as received, GatewayProcess(settings(upstream.url, received.url), tmp_path) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.APIError):  # the upstream's error event quotes the key it was sent
            for _ in client.chat.completions.create(model="fake/key-in-stream", messages=USER, stream=True):
                pass
        wait_until(lambda: any(not s.parent_span_id for s in received.spans), "the request's root span")
    [root] = [s for s in received.spans if not s.parent_span_id]
    facts = attributes(root)
    assert facts["error.type"] == "invalid_api_key" and root.status.code == root.status.STATUS_CODE_ERROR
    assert "[redacted]" in root.status.message
    every_value = str(facts) + root.status.message + "".join(str(attributes(s)) for s in received.spans)
    assert UPSTREAM_KEY[:10] not in every_value
