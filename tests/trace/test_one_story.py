"""Every surface tells the same story of one request: `firsttoken trace` through the gateway that stands
in for Lagos in front of its simulated region (whose distance is ground truth, declared in Server-Timing),
the gateway's Server-Timing header, its journey, /metrics, the journey log and the dashboard. A simulated
distance is distance, never queue."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from firsttoken.journey.server_timing import parse_server_timing
from support.gateway_process import GatewayProcess
from support.one_story import assert_one_story, verdict_kind
from support.waiting import wait_until

DISTANCE = "most of this wait was distance"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess({}, tmp_path_factory.mktemp("one-story")) as running:  # nothing configured: the sim
        yield running


def journey(gateway: GatewayProcess, request_id: str) -> dict:
    response = httpx.get(f"{gateway.url}/v1/journeys/{request_id}", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def test_trace_through_the_gateway_tells_its_journeys_story(gateway: GatewayProcess, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "firsttoken", "trace", f"{gateway.url}/v1", "--model",
                           "llama-3.1-8b", "--max-tokens", "16", "-n", "3", "--json"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")})
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout)["runs"]
    assert len(runs) == 3
    for run in runs:
        told = journey(gateway, run["request_id"])
        assert verdict_kind(told["verdict"]) == DISTANCE  # Lagos to Virginia: 129 ms, 86 of it light in fibre
        assert run["cache"] == "miss"  # a trace asks any cache on the way to let it through
        assert_one_story(run, told)


def test_server_timing_carries_the_journeys_round_trip(gateway: GatewayProcess) -> None:
    response = httpx.post(f"{gateway.url}/v1/chat/completions", timeout=30, json={
        "model": "llama-3.1-8b", "max_tokens": 4, "messages": [{"role": "user", "content": "how far?"}]})
    assert response.status_code == 200, response.text
    timing = parse_server_timing(response.headers["server-timing"])
    phases = journey(gateway, response.headers["x-request-id"])["phases"]
    assert timing["rtt"] == pytest.approx(phases["rtt"], abs=0.01) and timing["rtt"] > 100  # not the loopback's
    assert timing["floor"] == pytest.approx(phases["floor"], abs=0.01)


def phase_sums(gateway: GatewayProcess) -> dict[str, float]:
    """firsttoken_journey_phase_seconds's sum per phase, for the simulated region, in ms."""
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{gateway.url}/metrics", timeout=10).text):
        for sample in family.samples:
            if sample.name == "firsttoken_journey_phase_seconds_sum" and \
                    sample.labels.get("firsttoken_upstream") == "sim":
                sums[sample.labels["phase"]] = sample.value * 1000.0
    return sums


def test_the_metrics_the_log_and_the_dashboard_hold_the_journeys_phases(gateway: GatewayProcess) -> None:
    before = phase_sums(gateway)
    response = httpx.post(f"{gateway.url}/v1/chat/completions", timeout=30, json={
        "model": "llama-3.1-8b", "max_tokens": 8, "stream": True,
        "messages": [{"role": "user", "content": "one request, every surface"}]})
    assert response.status_code == 200
    request_id = response.headers["x-request-id"]
    told = journey(gateway, request_id)
    added = {phase: total - before.get(phase, 0.0) for phase, total in phase_sums(gateway).items()}
    for phase in ("rtt", "queue+prefill", "decode", "gateway"):  # /metrics takes the batch first: none late
        assert added[phase] == pytest.approx(told["phases"][phase], abs=0.05), phase

    def logged_journey() -> dict | None:
        """The request's journey once the log writer's flush has written it."""
        kept = httpx.get(f"{gateway.url}/dashboard/api/history?since={time.time() - 60}", timeout=10).json()["data"]
        return next((j for j in kept if j["request_id"] == request_id), None)

    logged = wait_until(logged_journey, "the journey in the log's history")
    live = httpx.get(f"{gateway.url}/dashboard/api/journeys/{request_id}", timeout=10).json()
    for phase, value in told["phases"].items():
        assert logged["phases"][phase] == pytest.approx(value, abs=0.01), phase
        assert live["phases"][phase] == value, phase
    assert live["verdict"] == told["verdict"]
