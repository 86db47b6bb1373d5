"""/dashboard's data, over real HTTP from a real gateway process: the state the map draws, the journeys in
memory and in the log, every journey live on the event stream; locked behind the admin key when there
are client keys, and never opened by a client's key. (The page in a browser: test_dashboard_browser.py.)"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import CLIENT_KEY, OTHER_CLIENT_KEY, UPSTREAM_KEY
from firsttoken import config
from support.gateway_process import GatewayProcess
from support.waiting import PATIENCE_S, wait_until

ADMIN_KEY = "dashboard-admin-key-for-tests-0123"
QUESTION = {"model": "fake/echo", "max_tokens": 8, "stream": True,
            "messages": [{"role": "user", "content": "what does the dashboard show?"}]}


@pytest.fixture(scope="module")
def open_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """Nothing configured: the simulated region in Virginia, seen from Lagos; no keys, so no lock."""
    with GatewayProcess({}, tmp_path_factory.mktemp("dashboard-open")) as running:
        yield running


@pytest.fixture(scope="module")
def locked_gateway(upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    settings = {"upstreams": {"fake": {"url": upstream.url, "key": UPSTREAM_KEY}},
                "keys": [{"name": "app", "key": CLIENT_KEY}, {"name": "other", "key": OTHER_CLIENT_KEY}],
                "admin_key": ADMIN_KEY}
    with GatewayProcess(settings, tmp_path_factory.mktemp("dashboard-locked"), args=["--access-log"]) as running:
        yield running


def ask(gateway: GatewayProcess, content: str, key: str = "none", model: str = "llama-3.1-8b") -> str:
    response = httpx.post(f"{gateway.url}/v1/chat/completions", timeout=30, headers={"Authorization": f"Bearer {key}"},
                          json={**QUESTION, "model": model, "messages": [{"role": "user", "content": content}]})
    assert response.status_code == 200, response.text
    return response.headers["x-request-id"]


def test_the_page_and_its_assets_come_from_the_gateway(open_gateway: GatewayProcess) -> None:
    page = httpx.get(f"{open_gateway.url}/dashboard", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]  # nothing loads from elsewhere
    uplot = httpx.get(f"{open_gateway.url}/dashboard/assets/vendor/uPlot.iife.min.js", timeout=10)
    assert uplot.status_code == 200 and uplot.headers["content-type"].startswith("text/javascript")
    land = httpx.get(f"{open_gateway.url}/dashboard/assets/vendor/land-110m.json", timeout=10).json()
    assert land["type"] == "Topology" and "land" in land["objects"]
    missing = httpx.get(f"{open_gateway.url}/dashboard/assets/../../config.py", timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_route"


def test_the_state_places_the_gateway_and_its_upstream(open_gateway: GatewayProcess) -> None:
    ask(open_gateway, "where are the GPUs?")
    typo = httpx.post(f"{open_gateway.url}/v1/chat/completions", timeout=30,
                      json={**QUESTION, "model": "sim/no-such-model"})
    assert typo.status_code == 404  # refused by the region at once: no distance, and no target to show
    state = httpx.get(f"{open_gateway.url}/dashboard/api/state", timeout=10).json()
    assert state["gateway"]["location"]["name"] == "Lagos, NG"
    (sim,) = state["upstreams"]
    assert sim["name"] == "sim" and sim["simulated"] and sim["region"]["name"].startswith("aws:us-east-1")
    assert sim["floor_ms"] == pytest.approx(85.9, abs=1)  # Lagos to Ashburn in fibre
    assert sim["rtt_ms"] == pytest.approx(128.8, abs=2)  # the simulated distance, as measured
    assert [t["target"] for t in state["targets"]] == ["sim/llama-3.1-8b"]
    assert state["targets"][0]["breaker"] == "closed" and state["cache"]["semantic"] is True


def test_recent_and_history_hold_the_same_journey(open_gateway: GatewayProcess) -> None:
    request_id = ask(open_gateway, "what did the log keep?")
    recent = httpx.get(f"{open_gateway.url}/dashboard/api/recent?limit=50", timeout=10).json()["data"]
    live = next(j for j in recent if j["request_id"] == request_id)

    def kept_in_the_log() -> dict | None:  # once past the sink's batch and the log writer's flush
        history = httpx.get(f"{open_gateway.url}/dashboard/api/history?since={time.time() - 600}", timeout=10)
        return next((j for j in history.json()["data"] if j["request_id"] == request_id), None)

    kept = wait_until(kept_in_the_log, "the journey in the log")
    assert live["verdict"].startswith("most of this wait was distance")
    assert kept["at"] == pytest.approx(live["at"], abs=0.05)
    for phase in ("rtt", "floor", "queue+prefill", "ttft", "e2e"):
        assert kept["phases"][phase] == pytest.approx(live["phases"][phase], abs=0.01), phase
    assert kept["cache"] == live["cache"] == "miss" and kept["upstream_timing"]["distance"] > 100
    # the verdict made again from the row (which keeps no input token count, so no prompt-cache clause)
    assert live["verdict"].startswith(kept["verdict"].partition("; the provider's prompt cache")[0])
    bad = httpx.get(f"{open_gateway.url}/dashboard/api/history?since=yesterday", timeout=10)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "since"


def read_events(url: str, headers: dict[str, str], until: float, found: list[tuple[str, dict]]) -> None:
    with httpx.stream("GET", url, headers=headers, timeout=PATIENCE_S) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        name = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                found.append((name, json.loads(line.removeprefix("data: "))))
            if time.monotonic() > until or any(n == "journey" for n, _ in found):
                return


def test_every_journey_arrives_on_the_event_stream(open_gateway: GatewayProcess) -> None:
    found: list[tuple[str, dict]] = []
    reader = threading.Thread(target=read_events, args=(f"{open_gateway.url}/dashboard/api/events", {},
                                                        time.monotonic() + PATIENCE_S, found))
    reader.start()
    wait_until(lambda: found, "the state, first on the stream once it is open")
    asked = time.time()
    request_id = ask(open_gateway, "is this live?")
    answered = time.time()
    reader.join(PATIENCE_S)
    assert found and found[0][0] == "state" and found[0][1]["upstreams"][0]["name"] == "sim"
    journeys = [data for name, data in found if name == "journey"]
    assert [j["request_id"] for j in journeys] == [request_id]
    assert asked - 0.01 <= journeys[0]["at"] <= answered and journeys[0]["phases"]["rtt"] > 100  # when it came
    assert journeys[0]["weight"] == 1  # a light load: every journey, whole
    whole = httpx.get(f"{open_gateway.url}/dashboard/api/journeys/{request_id}", timeout=10).json()
    assert whole["verdict"].startswith("most of this wait was distance") and whole["phases"] == journeys[0]["phases"]


def test_the_data_is_locked_behind_the_admin_key(locked_gateway: GatewayProcess) -> None:
    url = f"{locked_gateway.url}/dashboard/api/state"
    assert httpx.get(f"{locked_gateway.url}/dashboard", timeout=10).status_code == 200  # the page holds no data
    nothing = httpx.get(url, timeout=10)
    assert nothing.status_code == 401 and nothing.json()["error"]["code"] == "invalid_api_key"
    client = httpx.get(url, headers={"Authorization": f"Bearer {CLIENT_KEY}"}, timeout=10)
    assert client.status_code == 403 and client.json()["error"]["code"] == "not_admin"
    wrong = httpx.get(url, headers={"Authorization": "Bearer not-the-admin-key-at-all"}, timeout=10)
    assert wrong.status_code == 401
    for name in ("state", "recent", "history", "events"):
        assert httpx.get(f"{locked_gateway.url}/dashboard/api/{name}", timeout=10).status_code == 401, name
    admin = httpx.get(url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=10)
    assert admin.status_code == 200 and admin.json()["upstreams"][0]["name"] == "fake"


def test_the_admin_sees_every_tenant_and_a_tenant_only_its_own(locked_gateway: GatewayProcess) -> None:
    mine = ask(locked_gateway, "tenant one", CLIENT_KEY, "fake/echo")
    theirs = ask(locked_gateway, "tenant two", OTHER_CLIENT_KEY, "fake/echo")
    admin = httpx.get(f"{locked_gateway.url}/dashboard/api/recent", timeout=10,
                      headers={"Authorization": f"Bearer {ADMIN_KEY}"}).json()["data"]
    assert {mine, theirs} <= {j["request_id"] for j in admin}
    assert {j["tenant"] for j in admin} >= {"app", "other"}
    own = httpx.get(f"{locked_gateway.url}/v1/journeys?limit=100", timeout=10,
                    headers={"Authorization": f"Bearer {CLIENT_KEY}"}).json()["data"]
    assert mine in {j["request_id"] for j in own} and theirs not in {j["request_id"] for j in own}
    assert ADMIN_KEY not in locked_gateway.log_path.read_text()  # the access log saw it, redacted


def test_locked_with_no_admin_key_and_off_when_disabled(upstream, tmp_path: Path) -> None:
    settings = {"upstreams": {"fake": {"url": upstream.url, "key": UPSTREAM_KEY}},
                "keys": [{"name": "app", "key": CLIENT_KEY}]}
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    with GatewayProcess(settings, tmp_path / "a") as gateway:
        locked = httpx.get(f"{gateway.url}/dashboard/api/state", headers={"Authorization": f"Bearer {CLIENT_KEY}"},
                           timeout=10)
        assert locked.status_code == 403 and locked.json()["error"]["code"] == "admin_key_not_set"
    with GatewayProcess({**settings, "dashboard": {"enabled": False}}, tmp_path / "b") as gateway:
        assert httpx.get(f"{gateway.url}/dashboard", timeout=10).status_code == 404


@pytest.mark.parametrize("admin, words", [
    ({"admin_key": CLIENT_KEY}, "also a client key"),
    ({"admin_key": "short"}, "at least 16 characters"),
    ({"dashboard": {"admin_key": "short"}}, "at least 16 characters"),  # the older place is checked too
    ({"admin_key": ADMIN_KEY, "dashboard": {"admin_key": ADMIN_KEY}}, "give the key once"),
])
def test_a_bad_admin_key_is_refused_at_load(admin: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        config.Settings.model_validate({"keys": [{"name": "app", "key": CLIENT_KEY}], **admin})
