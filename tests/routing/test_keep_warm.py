"""Scale-to-zero against the simulated region (a model unloaded after 1 s idle, 0.6 s to load back):
the router learns the cold-start penalty from the streams that met one and reports it at /v1/routing,
and keep-warm pings keep the model loaded through an idle spell."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from conftest import ADMIN, ADMIN_KEY, CLIENT_KEY
from support.gateway_process import GatewayProcess
from support.sim_region import region_on_loopback

USER = [{"role": "user", "content": "hello"}]


@pytest.fixture()
def region():
    with region_on_loopback(idle_unload=1.0, engine_start_s=0.6, load_gb_s=10_000) as (port, sim):
        yield port, sim


def settings(port: int, keep_warm: dict | None) -> dict:
    upstream = {"url": f"http://127.0.0.1:{port}/v1", **({"keep_warm": keep_warm} if keep_warm else {})}
    # every request must cross to the upstream: the edge cache (on by default) has its own tests
    return {"cache": False, "upstreams": {"sim": upstream}, "models": {"chat": ["sim/llama-3.1-8b"]},
            "keys": [{"name": "app", "key": CLIENT_KEY}], "admin_key": ADMIN_KEY}


def first_token_s(gateway: GatewayProcess) -> float:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)
    started = time.perf_counter()
    first: float | None = None
    # Read to the end: the router learns from a stream that ended, not from one the client walked out of.
    for chunk in client.chat.completions.create(model="chat", messages=USER, stream=True, max_tokens=4):
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - started
    assert first is not None, "no token"
    return first


def routing(gateway: GatewayProcess) -> dict:
    data = httpx.get(gateway.url + "/v1/routing", headers=ADMIN).json()["data"]
    return next(t for t in data if t["target"] == "sim/llama-3.1-8b")


def test_the_cold_start_penalty_is_learned_and_reported(region, tmp_path) -> None:
    port, sim = region
    with GatewayProcess(settings(port, None), tmp_path) as gateway:
        first_token_s(gateway)  # the region may have unloaded its model while the gateway started
        loads = sim.replicas["llama-3.1-8b"][0].loads
        warm = [first_token_s(gateway) for _ in range(3)]
        time.sleep(1.6)  # the model unloads after 1 s
        cold = first_token_s(gateway)
        assert cold > max(warm) + 0.5
        # The router learns from a stream as it ends, a few tokens after the first: wait for it, not a guess.
        deadline = time.monotonic() + 5
        while (learned := routing(gateway)["cold_start"])["seen"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert learned["seen"] == 1 and 500 < learned["penalty_ms"] < 1500
    assert 1.5 <= learned["unloads_after_s"] <= 2.5
    assert sim.replicas["llama-3.1-8b"][0].loads == loads + 1


def test_keep_warm_pings_keep_the_model_loaded(region, tmp_path) -> None:
    port, sim = region
    with GatewayProcess(settings(port, {"idle_s": 0.5}), tmp_path) as gateway:
        first_token_s(gateway)  # loads the model (it unloaded while the gateway started)
        loads = sim.replicas["llama-3.1-8b"][0].loads
        time.sleep(2.2)  # idle for twice as long as the platform keeps a model: pings go every 0.5 s
        assert first_token_s(gateway) < 0.4
        assert routing(gateway)["keep_warm_pings_last_hour"] >= 3
    assert sim.replicas["llama-3.1-8b"][0].loads == loads  # never unloaded again
