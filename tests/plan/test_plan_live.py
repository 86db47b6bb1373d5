"""The plan against the live thing: the same requests, at the same moments, sent through a real gateway to
a real simulated region across the packet-level delay line, must feel as the plan says: time to first
token and to the last token, p50 and p95, within 5 %.

The users (in Nairobi) sit beside the gateway, in the near network namespace; it keeps its connections to
the region warm: the plan's users with `reuse: 1` and no last mile. The region runs the option's deployment
in the far namespace, the delay line set to the round trip the plan's network model gives."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml

from firsttoken.lab.delayline import DelayLine
from firsttoken.plan.scenario import Scenario
from firsttoken.plan.simulate import routes_to, simulate
from support.netns import wait_for_port

pytestmark = pytest.mark.quiet  # 5 % of a time to first token: not beside a loaded gateway

SIM_PORT, GATEWAY_PORT = 9001, 8787
SCENARIO = Scenario.model_validate({
    "name": "live", "seed": 7, "duration_s": 40, "path_factor": 1.5,
    "users": {"rate_per_s": 1.5, "last_mile_ms": 0, "reuse": 1.0, "cities": [{"place": "nairobi", "share": 1}]},
    "workload": {"preset": "chat", "stream": True},
    "options": [{"name": "us-east-1", "self_hosted": {"place": "aws:us-east-1", "gpu": "h100",
                                                      "model": "llama-3.1-8b", "usd_per_gpu_hour": 4}}]})

# Runs in the near namespace: each request at its moment, its prompt exactly its length in the region's
# tokens (four framing tokens and its words, the first one its own so that no prefix is shared), run to
# its answer's length; prints each one's time to first content and to the end, from its sending.
CLIENT = textwrap.dedent("""
    import asyncio, json, sys, time, httpx
    base, plan = sys.argv[1], json.loads(sys.stdin.read())

    async def one(client, start, i, sent, prompt, answer):
        await asyncio.sleep(max(0.0, start + sent - time.monotonic()))
        began = time.monotonic()
        words = " ".join([f"r{i}"] + ["w"] * (prompt - 5))
        body = {"model": "far/llama-3.1-8b", "stream": True, "max_tokens": answer, "ignore_eos": True,
                "messages": [{"role": "user", "content": words}]}
        first = None
        async with client.stream("POST", base + "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200, response.status_code
            async for line in response.aiter_lines():
                if first is None and '"content":"' in line and '"content":""' not in line:
                    first = time.monotonic()
        return {"ttft": first - began, "e2e": time.monotonic() - began}

    async def main():
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=200)) as client:
            start = time.monotonic() + 0.5
            print(json.dumps(await asyncio.gather(*(one(client, start, i, *r) for i, r in enumerate(plan)))))

    asyncio.run(main())
""")


@pytest.fixture(scope="module")
def felt(tmp_path_factory) -> Iterator[dict[str, np.ndarray]]:
    reason = DelayLine.unavailable_reason()
    if reason:
        pytest.skip(f"delay line unavailable: {reason}")
    option = SCENARIO.options[0]
    rtt_ms = routes_to(SCENARIO, option)[0].rtt_ms
    run = simulate(SCENARIO, option)
    journeys = sorted(run.journeys, key=lambda j: j.sent)
    planned = {"ttft": np.array([j.first_token + j.one_way_s - j.sent for j in journeys]),
               "e2e": np.array([j.finished + j.one_way_s - j.sent for j in journeys])}
    work: Path = tmp_path_factory.mktemp("plan-live")
    with DelayLine(rtt_ms=rtt_ms) as line:
        line.run_in(line.server_ns, [sys.executable, "-m", "firsttoken", "sim", "--host", line.server_ip,
                                     "--port", str(SIM_PORT), "--model", "llama-3.1-8b", "--gpu", "h100"],
                    stdout=subprocess.DEVNULL, stderr=(work / "sim.log").open("w"))
        wait_for_port(line, line.client_ns, line.server_ip, SIM_PORT)
        config = work / "firsttoken.yaml"
        config.write_text(yaml.safe_dump({"cache": False, "upstreams": {"far": {
            "url": f"http://{line.server_ip}:{SIM_PORT}/v1", "pool": {"warm": 16}}}}))
        line.run_in(line.client_ns, [sys.executable, "-m", "firsttoken", "serve", "--config", str(config),
                                     "--port", str(GATEWAY_PORT)],
                    stdout=subprocess.DEVNULL, stderr=(work / "gateway.log").open("w"))
        wait_for_port(line, line.client_ns, "127.0.0.1", GATEWAY_PORT)
        client = work / "client.py"
        client.write_text(CLIENT)
        plan = json.dumps([(j.sent, j.prompt, j.answer) for j in journeys])
        result = line.run(line.client_ns, [sys.executable, str(client), f"http://127.0.0.1:{GATEWAY_PORT}"],
                          input=plan, capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, result.stderr + (work / "gateway.log").read_text()
    live = json.loads(result.stdout)
    yield {"planned ttft": planned["ttft"], "planned e2e": planned["e2e"],
           "live ttft": np.array([r["ttft"] for r in live]), "live e2e": np.array([r["e2e"] for r in live])}


@pytest.mark.parametrize("measure", ["ttft", "e2e"])
@pytest.mark.parametrize("percentile", [50, 95])
def test_the_plan_feels_as_the_live_region_does(felt: dict[str, np.ndarray], measure: str, percentile: int) -> None:
    planned = float(np.percentile(felt[f"planned {measure}"], percentile))
    live = float(np.percentile(felt[f"live {measure}"], percentile))
    print(f"{measure} p{percentile}: planned {planned * 1000:.0f} ms, live {live * 1000:.0f} ms")
    assert live == pytest.approx(planned, rel=0.05)
