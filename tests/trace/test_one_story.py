"""Every surface tells the same story of one request: `firsttoken trace` through the gateway that stands
in for Lagos in front of its simulated region (whose distance is ground truth, declared in Server-Timing),
the gateway's Server-Timing header, and its journey. A simulated distance is distance, never queue."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from firsttoken.journey.server_timing import parse_server_timing
from support.gateway_process import GatewayProcess
from support.one_story import assert_one_story, verdict_kind

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
