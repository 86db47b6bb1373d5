"""Scale-to-zero against the simulated region (a model unloaded after UNLOAD_S idle, LOAD_S to load back):
the router learns the cold-start penalty from the streams that met one and reports it at /v1/routing,
and keep-warm pings keep the model loaded through an idle spell.

What the region did is its own account, not this machine's clock: whether its replica is loaded, how often
it loaded, and the `cold` in each answer's Server-Timing (carried into the journey)."""

from __future__ import annotations

import math
import time

import httpx
import openai
import pytest

from conftest import ADMIN, ADMIN_KEY, CLIENT_KEY
from firsttoken.routing.coldstart import MIN_IDLE_S
from firsttoken.sim.replica import Replica
from support.gateway_process import GatewayProcess
from support.sim_region import region_on_loopback
from support.waiting import not_before, wait_until, within

USER = [{"role": "user", "content": "hello"}]
MODEL = "llama-3.1-8b"
UNLOAD_S = 1.5  # past the router's MIN_IDLE_S, and a second past a keep-warm ping's due: room for a late tick
LOAD_S = 1.0  # the engine's start, twice the penalty's lower bound: a slow warm first token cannot hide it
KEEP_WARM_S = 0.5


@pytest.fixture()
def region():
    with region_on_loopback(idle_unload=UNLOAD_S, engine_start_s=LOAD_S, load_gb_s=10_000) as (port, sim):
        yield port, sim


def settings(port: int, keep_warm: dict | None) -> dict:
    upstream = {"url": f"http://127.0.0.1:{port}/v1", **({"keep_warm": keep_warm} if keep_warm else {})}
    # every request must cross to the upstream: the edge cache (on by default) has its own tests
    return {"cache": False, "upstreams": {"sim": upstream}, "models": {"chat": [f"sim/{MODEL}"]},
            "keys": [{"name": "app", "key": CLIENT_KEY}], "admin_key": ADMIN_KEY}


def ask(gateway: GatewayProcess) -> str:
    """One stream, read to the end (the router learns from a stream that ended, not from one the client
    walked out of); its request id."""
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0, timeout=20)
    raw = client.chat.completions.with_raw_response.create(model="chat", messages=USER, stream=True, max_tokens=4)
    assert any(chunk.choices and chunk.choices[0].delta.content for chunk in raw.parse()), "no token"
    return raw.headers["x-request-id"]


def cold_ms(gateway: GatewayProcess, request_id: str) -> float:
    """The region's own account of the load a request waited for (Server-Timing `cold`)."""
    def found() -> dict | None:
        response = httpx.get(f"{gateway.url}/v1/journeys/{request_id}", headers=ADMIN, timeout=5)
        return response.json() if response.status_code == 200 else None

    return wait_until(found, f"the journey of {request_id}")["upstream_timing"].get("cold", 0.0)


def routing(gateway: GatewayProcess) -> dict:
    data = httpx.get(gateway.url + "/v1/routing", headers=ADMIN, timeout=5).json()["data"]
    return next(t for t in data if t["target"] == f"sim/{MODEL}")


def replica(sim) -> Replica:
    return sim.replicas[MODEL][0]


def test_the_cold_start_penalty_is_learned_and_reported(region, tmp_path) -> None:
    port, sim = region
    assert UNLOAD_S > MIN_IDLE_S  # an idle spell that unloads the model is one the router counts
    with GatewayProcess(settings(port, None), tmp_path) as gateway:
        ask(gateway)  # the region may have unloaded its model while the gateway started
        loads = replica(sim).loads
        warm_from = time.monotonic()
        warm = [ask(gateway) for _ in range(3)]
        # Idle until the region unloaded its model, and the gateway saw the spell as long (its idle clock
        # starts when it relayed the stream's end, a little after the region's).
        wait_until(lambda: not replica(sim).loaded, "the idle model to unload")
        wait_until(lambda: routing(gateway)["idle_s"] >= UNLOAD_S, "the gateway to see the idle spell")
        cold = ask(gateway)
        cold_until = time.monotonic()
        # The router learns from a stream as it ends, a few tokens after the first: wait for it.
        learned = wait_until(lambda: (seen := routing(gateway)["cold_start"])["seen"] and seen,
                             "the router to learn the cold start")
        assert [cold_ms(gateway, r) for r in warm] == [0.0] * 3
        assert not_before(cold_ms(gateway, cold) / 1000, LOAD_S)  # the whole load, as the region tells it
    assert replica(sim).loads == loads + 1
    # Learned from this machine's clock: the cold first token less the warm ones, and the idle spell that
    # ended in it (at least what the gateway reported before the cold one was asked; /v1/routing rounds
    # to 0.1 s), which began after the warm streams did.
    assert learned["seen"] == 1 and LOAD_S * 1000 / 2 < learned["penalty_ms"] < within(LOAD_S) * 1000, learned
    assert UNLOAD_S - 0.1 <= learned["unloads_after_s"] <= cold_until - warm_from, learned


def test_keep_warm_pings_keep_the_model_loaded(region, tmp_path) -> None:
    port, sim = region
    with GatewayProcess(settings(port, {"idle_s": KEEP_WARM_S}), tmp_path) as gateway:
        ask(gateway)  # loads the model (it unloaded while the gateway started)
        loads = replica(sim).loads
        # Idle for longer than the platform keeps a model: each ping goes after KEEP_WARM_S of quiet (the
        # last request's or ping's), so this many pings span more than UNLOAD_S however slow the machine.
        pings = math.floor(UNLOAD_S / KEEP_WARM_S) + 1
        wait_until(lambda: routing(gateway)["keep_warm_pings_last_hour"] >= pings, f"{pings} keep-warm pings",
                   poll_s=0.1)
        assert replica(sim).loaded and replica(sim).loads == loads
        assert cold_ms(gateway, ask(gateway)) == 0.0  # the region had it loaded: no wait
    assert replica(sim).loads == loads  # never unloaded again
