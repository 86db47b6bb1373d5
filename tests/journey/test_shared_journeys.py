"""`journeys.redis`: replicas of one gateway share their recent journeys, so that any of them answers
/v1/journeys and /v1/journeys/{id} for all; with Redis away, each answers with its own."""

from __future__ import annotations

import httpx

from conftest import ADMIN, CLIENT_KEY, OTHER_CLIENT_KEY, gateway_settings
from support.gateway_process import GatewayProcess
from support.waiting import wait_until

USER = [{"role": "user", "content": "hello"}]
AS = {name: {"authorization": f"Bearer {key}"} for name, key in (("app", CLIENT_KEY), ("other", OTHER_CLIENT_KEY))}


def ask(gateway: GatewayProcess, tenant: str) -> str:
    answer = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "chat", "messages": USER},
                        headers=AS[tenant], timeout=10)
    assert answer.status_code == 200
    return answer.headers["x-request-id"]


def listed(gateway: GatewayProcess, headers: dict[str, str]) -> list[str]:
    journeys = httpx.get(gateway.url + "/v1/journeys", params={"limit": 100}, headers=headers).json()["data"]
    return [journey["request_id"] for journey in journeys]


def test_any_replica_answers_for_every_replicas_journeys(upstream, redis_server, tmp_path) -> None:
    settings = gateway_settings(upstream.url)
    settings["journeys"] = {"redis": redis_server.url, "log": None}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with GatewayProcess(settings, tmp_path / "a") as a, GatewayProcess(settings, tmp_path / "b") as b:
        mine = [ask(a, "app"), ask(b, "app")]
        theirs = [ask(a, "other")]
        for replica in (a, b):
            # a batch reaches Redis within a tenth of a second or so
            wait_until(lambda r=replica: set(listed(r, AS["app"])) >= set(mine), "both replicas' journeys listed")
            for request_id in mine:
                journey = httpx.get(f"{replica.url}/v1/journeys/{request_id}", headers=AS["app"])
                assert journey.status_code == 200 and journey.json()["request_id"] == request_id
            # another tenant's journey is not found, on either replica
            assert httpx.get(f"{replica.url}/v1/journeys/{theirs[0]}", headers=AS["app"]).status_code == 404
            assert not set(listed(replica, AS["app"])) & set(theirs)
            assert set(listed(replica, ADMIN)) >= set(mine + theirs)  # newest first, every tenant's
            assert listed(replica, ADMIN)[0] == theirs[0]


def test_with_redis_away_each_replica_shows_its_own(upstream, tmp_path) -> None:
    settings = gateway_settings(upstream.url)
    settings["journeys"] = {"redis": "redis://127.0.0.1:1/0", "log": None}  # nothing listens there
    with GatewayProcess(settings, tmp_path) as gateway:
        request_id = ask(gateway, "app")
        wait_until(lambda: request_id in listed(gateway, AS["app"]), "its own journey listed")
        assert httpx.get(f"{gateway.url}/v1/journeys/{request_id}", headers=AS["app"]).status_code == 200
