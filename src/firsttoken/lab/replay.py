"""A plan's requests, played live: each sent at its moment, from beside a real gateway, to a real simulated
region across the packet-level delay line set to the plan's own round trip. What the users would feel,
measured, to hold the plan's numbers against (`firsttoken plan`'s validation: tests/plan/test_plan_live.py,
bench/plan_live.py).

The plan's users must sit beside their gateway with its connections warm (one city, `reuse: 1`, no last
mile, the option's gateway in that city with its cache off, as the live one runs), and the option must be
self-hosted: the gateway here is in the near namespace, the region in the far one, running the option's
deployment.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from firsttoken.lab.delayline import DelayLine
from firsttoken.plan.journey import Journey
from firsttoken.plan.network import INITIAL_WINDOW_SEGMENTS
from firsttoken.plan.scenario import Scenario
from firsttoken.plan.simulate import routes_to, simulate
from firsttoken.plan.summary import connections_peak

SIM_PORT, GATEWAY_PORT = 9001, 8787
# The client's prompts are words of one letter: two bytes a token on the wire ("w "), for a scenario's
# workload.bytes_per_token (how many round trips a long prompt needs in TCP's slow start).
LIVE_BYTES_PER_TOKEN = 2.0

# Runs in the near namespace: each request at its moment, its prompt exactly its length in the region's
# tokens (four framing tokens and its words, the first one its own so that no prefix is shared), run to
# its answer's length; prints each one's time to first content and to the end, from its sending.
CLIENT = textwrap.dedent("""
    import asyncio, json, sys, time, httpx
    base, model, plan = sys.argv[1], sys.argv[2], json.loads(sys.stdin.read())

    async def one(client, start, i, sent, prompt, answer):
        await asyncio.sleep(max(0.0, start + sent - time.monotonic()))
        began = time.monotonic()
        words = " ".join([f"r{i}"] + ["w"] * (prompt - 5))
        body = {"model": "far/" + model, "stream": True, "max_tokens": answer, "ignore_eos": True,
                "messages": [{"role": "user", "content": words}]}
        first = None
        async with client.stream("POST", base + "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200, response.status_code
            async for line in response.aiter_lines():
                if first is None and '"content":"' in line and '"content":""' not in line:
                    first = time.monotonic()
        return {"ttft": first - began, "e2e": time.monotonic() - began}

    async def main():
        async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=500)) as client:
            for n in range(3):  # the processes' first requests pay for their imports and first calls: not timed
                await one(client, time.monotonic(), f"warm-up {n}", 0, 50, 2)
            start = time.monotonic() + 0.5
            print(json.dumps(await asyncio.gather(*(one(client, start, i, *r) for i, r in enumerate(plan)))))

    asyncio.run(main())
""")


@dataclass
class Felt:
    """Times to first token and to the last, in seconds, one per request, in the order they were sent."""

    ttft: np.ndarray
    e2e: np.ndarray


def planned(journeys: list[Journey]) -> Felt:
    return Felt(np.array([j.first_token + j.one_way_s - j.sent for j in journeys]),
                np.array([j.finished + j.one_way_s - j.sent for j in journeys]))


def replay(scenario: Scenario, work: Path | None = None) -> tuple[Felt, Felt]:
    """(as planned, as felt live) for the scenario's first option."""
    option = scenario.options[0]
    hosted, gateway = option.self_hosted, option.gateway
    users = scenario.users
    if (hosted is None or gateway is None or gateway.cache or len(users.cities) != 1 or users.reuse != 1
            or routes_to(scenario, option)[0].rtt_ms != 0):
        raise ValueError("a replay needs one city, reuse: 1, no last mile and a self-hosted option behind a "
                         "gateway in that city with cache: false")
    journeys = sorted(simulate(scenario, option).journeys, key=lambda j: j.sent)
    work = work or Path(tempfile.mkdtemp(prefix="firsttoken-replay-"))
    with DelayLine(rtt_ms=scenario.way(gateway.where, option.where, 0.0).rtt_ms) as line:
        if gateway.initial_window != INITIAL_WINDOW_SEGMENTS:  # the gateway's host sends it, the region's takes it
            for ns in (line.client_ns, line.server_ns):
                line.initial_window(ns, gateway.initial_window)
        line.run_in(line.server_ns, [sys.executable, "-m", "firsttoken", "sim", "--host", line.server_ip,
                                     "--port", str(SIM_PORT), "--model", hosted.model, "--gpu", hosted.gpu,
                                     "--tp", str(hosted.tp), "--precision", hosted.precision,
                                     "--replicas", str(hosted.replicas)],
                    stdout=subprocess.DEVNULL, stderr=(work / "sim.log").open("w"), cwd=work)
        line.wait_for_port(line.client_ns, line.server_ip, SIM_PORT)
        config = work / "firsttoken.yaml"
        # as the plan has it: every request on a warm connection across the ocean, so the pool holds as many
        # as the busiest moment needs (the gateway opens its warm ones at start-up)
        warm = min(max(connections_peak(journeys), 16), 256)
        config.write_text(yaml.safe_dump({"cache": False, "journeys": {"log": None}, "upstreams": {"far": {
            "url": f"http://{line.server_ip}:{SIM_PORT}/v1", "pool": {"warm": warm}}}}))
        line.run_in(line.client_ns, [sys.executable, "-m", "firsttoken", "serve", "--config", str(config),
                                     "--port", str(GATEWAY_PORT)],
                    stdout=subprocess.DEVNULL, stderr=(work / "gateway.log").open("w"), cwd=work)
        line.wait_for_port(line.client_ns, "127.0.0.1", GATEWAY_PORT)
        client = work / "client.py"
        client.write_text(CLIENT)
        result = line.run(line.client_ns, [sys.executable, str(client), f"http://127.0.0.1:{GATEWAY_PORT}",
                                           hosted.model],
                          input=json.dumps([(j.sent, j.prompt, j.answer) for j in journeys]),
                          capture_output=True, text=True, timeout=scenario.duration_s + 300)
        if result.returncode != 0:
            raise RuntimeError(result.stderr + (work / "gateway.log").read_text())
    live = json.loads(result.stdout)
    return planned(journeys), Felt(np.array([r["ttft"] for r in live]), np.array([r["e2e"] for r in live]))
