"""The operator's routes are locked when anything is: with client keys (or an admin key) configured, /metrics,
/v1/routing, every tenant's journeys and the dashboard's data need `admin_key`; a client key reads only its
own journeys; health and readiness stay open for load balancers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import ADMIN, ADMIN_KEY, CLIENT_KEY, OTHER_CLIENT_KEY, gateway_settings
from support.gateway_process import GatewayProcess

CLIENT = {"authorization": f"Bearer {CLIENT_KEY}"}
OTHER = {"authorization": f"Bearer {OTHER_CLIENT_KEY}"}
WRONG = {"authorization": "Bearer not-a-key-this-gateway-knows"}
ADMIN_ONLY = ("/metrics", "/v1/routing", "/dashboard/api/state", "/dashboard/api/recent")


@pytest.fixture(scope="module")
def gateway(upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(gateway_settings(upstream.url), tmp_path_factory.mktemp("admin")) as process:
        yield process


def ask(gateway: GatewayProcess, headers: dict[str, str]) -> str:
    response = httpx.post(f"{gateway.url}/v1/chat/completions", headers=headers, timeout=10,
                          json={"model": "chat", "messages": [{"role": "user", "content": "who sees this?"}]})
    assert response.status_code == 200, response.text
    return response.headers["x-request-id"]


@pytest.mark.parametrize("path", ADMIN_ONLY)
def test_every_tenants_data_needs_the_admin_key(gateway: GatewayProcess, path: str) -> None:
    nothing = httpx.get(gateway.url + path, timeout=10)
    assert nothing.status_code == 401 and nothing.json()["error"]["code"] == "invalid_api_key"
    client = httpx.get(gateway.url + path, headers=CLIENT, timeout=10)
    assert client.status_code == 403 and client.json()["error"]["code"] == "not_admin"
    assert httpx.get(gateway.url + path, headers=WRONG, timeout=10).status_code == 401
    assert httpx.get(gateway.url + path, headers=ADMIN, timeout=10).status_code == 200


def test_a_client_reads_its_own_journeys_and_the_operator_every_tenants(gateway: GatewayProcess) -> None:
    mine, theirs = ask(gateway, CLIENT), ask(gateway, OTHER)
    own = {j["request_id"] for j in httpx.get(f"{gateway.url}/v1/journeys?limit=100", headers=CLIENT,
                                               timeout=10).json()["data"]}
    assert mine in own and theirs not in own
    assert httpx.get(f"{gateway.url}/v1/journeys/{theirs}", headers=CLIENT, timeout=10).status_code == 404
    every = {j["request_id"] for j in httpx.get(f"{gateway.url}/v1/journeys?limit=100", headers=ADMIN,
                                                 timeout=10).json()["data"]}
    assert {mine, theirs} <= every
    assert httpx.get(f"{gateway.url}/v1/journeys/{theirs}", headers=ADMIN, timeout=10).status_code == 200
    assert httpx.get(f"{gateway.url}/v1/journeys", timeout=10).status_code == 401
    assert httpx.get(f"{gateway.url}/v1/journeys", headers=WRONG, timeout=10).status_code == 401


def test_the_admin_key_is_not_a_client_key(gateway: GatewayProcess) -> None:
    response = httpx.post(f"{gateway.url}/v1/chat/completions", headers=ADMIN, timeout=10,
                          json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 401


def test_health_and_readiness_stay_open(gateway: GatewayProcess) -> None:
    assert httpx.get(gateway.url + "/healthz", timeout=10).status_code == 200
    assert httpx.get(gateway.url + "/readyz", timeout=10).status_code in (200, 503)  # no key asked either way


def test_client_keys_without_an_admin_key_lock_the_operators_routes(upstream, tmp_path: Path) -> None:
    settings = {k: v for k, v in gateway_settings(upstream.url).items() if k != "admin_key"}
    with GatewayProcess(settings, tmp_path) as gateway:
        for path in ADMIN_ONLY:
            locked = httpx.get(gateway.url + path, headers=CLIENT, timeout=10)
            assert locked.status_code == 403, path
            assert locked.json()["error"]["code"] == "admin_key_not_set"
            assert "admin_key" in locked.json()["error"]["message"]
        assert httpx.get(f"{gateway.url}/v1/journeys", headers=CLIENT, timeout=10).status_code == 200


def test_an_admin_key_alone_locks_them_while_clients_stay_anonymous(upstream, tmp_path: Path) -> None:
    settings = {k: v for k, v in gateway_settings(upstream.url).items() if k != "keys"}
    with GatewayProcess(settings, tmp_path) as gateway:
        ask(gateway, {})  # no client keys: anyone who reaches the gateway may ask
        for path in (*ADMIN_ONLY, "/v1/journeys"):
            assert httpx.get(gateway.url + path, timeout=10).status_code == 401, path
            assert httpx.get(gateway.url + path, headers=ADMIN, timeout=10).status_code == 200, path


def test_the_older_dashboard_admin_key_still_opens_them(upstream, tmp_path: Path) -> None:
    settings = {k: v for k, v in gateway_settings(upstream.url).items() if k != "admin_key"}
    with GatewayProcess({**settings, "dashboard": {"admin_key": ADMIN_KEY}}, tmp_path) as gateway:
        assert httpx.get(gateway.url + "/metrics", headers=ADMIN, timeout=10).status_code == 200
        assert httpx.get(gateway.url + "/metrics", headers=CLIENT, timeout=10).status_code == 403
