"""Faults on purpose: stalls that show as queue in the ground truth, failures by status or by a dropped
connection, a busy region, all repeatable from a seed and changeable while the region runs."""

from __future__ import annotations

import httpx
import pytest

from firsttoken.sim.faults import Faults, FaultSettings
from support.sim_region import region_on_loopback
from support.waiting import not_before, wait_until, within

from .test_server import server_timing

ASK = {"model": "llama-3.1-8b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def test_draws_are_repeatable_and_near_their_share() -> None:
    def stalls(seed: int) -> list[bool]:
        faults = Faults(FaultSettings(stall_share=0.1, stall_s=2, seed=seed))
        return [faults.draw().delay_s == 2 for _ in range(2000)]

    assert stalls(7) == stalls(7) != stalls(8)
    assert 150 < sum(stalls(7)) < 250
    failing = Faults(FaultSettings(error_share=1, error="reset", stall_share=1))
    assert failing.draw().error == "reset"  # a failed request does not also stall


def test_a_stall_and_a_busy_region_wait_in_the_queue() -> None:
    with region_on_loopback(faults={"stall_share": 1, "stall_s": 0.3}) as (port, _), \
            httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
        response = client.post("/v1/chat/completions", json=ASK)
        assert response.status_code == 200
        # the stall is in the queue the region declares, once: no less than it, and no more than the
        # client waited for the whole answer (however slow this machine made that)
        elapsed_ms = response.elapsed.total_seconds() * 1000
        assert 300 <= server_timing(response.headers["server-timing"])["queue"] <= elapsed_ms
        assert not_before(elapsed_ms, 300) and elapsed_ms < within(0.3) * 1000
        changed = client.post("/sim/faults", json={"stall_share": 0, "queue_ms": 120}).json()
        assert changed["queue_ms"] == 120 and changed["stall_s"] == 0.3  # fields not sent are kept
        busy = client.post("/v1/chat/completions", json=ASK)
        assert 120 <= server_timing(busy.headers["server-timing"])["queue"] <= busy.elapsed.total_seconds() * 1000


@pytest.mark.parametrize("status", [500, 503])
def test_failures_answer_in_the_formats_error_shape(status: int) -> None:
    with region_on_loopback(faults={"error_share": 1, "error": status}) as (port, _), \
            httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
        response = client.post("/v1/chat/completions", json=ASK)
        assert response.status_code == status
        assert response.json()["error"]["code"] == "simulated_fault"
        anthropic = client.post("/v1/messages", json={**ASK, "max_tokens": 3})
        assert anthropic.status_code == status and anthropic.json()["type"] == "error"


def test_a_reset_drops_the_connection_with_no_answer() -> None:
    with region_on_loopback(faults={"error_share": 1, "error": "reset"}) as (port, _), \
            httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
        with pytest.raises(httpx.RemoteProtocolError):
            client.post("/v1/chat/completions", json=ASK)
        assert client.post("/sim/faults", json={"error_share": 0}).status_code == 200
        assert client.post("/v1/chat/completions", json=ASK).status_code == 200


@pytest.mark.parametrize(("body", "says"), [
    ({"error_share": 2}, "error_share: Input should be less than or equal to 1"),
    ({"error": "teapot"}, "error: Input should be '500', '503' or 'reset'"),
    ({"stalls": 1}, "stalls: Extra inputs are not permitted"),
    ([1], "send a JSON object"),
])
def test_bad_changes_are_refused_and_change_nothing(body: object, says: str) -> None:
    with region_on_loopback() as (port, _), httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
        response = client.post("/sim/faults", json=body)
        assert response.status_code == 400 and says in response.json()["error"]["message"]
        assert client.get("/sim/faults").json() == FaultSettings().model_dump()


def test_the_command_lines_flags_become_the_faults_settings() -> None:
    from firsttoken.cli import _fault_flags
    from firsttoken.config import ConfigError, sim_settings

    faults = sim_settings({"faults": _fault_flags("0.1:2.5", "0.25:reset", 300)}).faults
    assert faults == FaultSettings(stall_share=0.1, stall_s=2.5, error_share=0.25, error="reset", queue_ms=300)
    assert sim_settings({"faults": _fault_flags("0.1", "1", None)}).faults == FaultSettings(stall_share=0.1,
                                                                                             error_share=1)
    with pytest.raises(ConfigError, match="faults.error"):
        sim_settings({"faults": _fault_flags(None, "1:teapot", None)})


def test_the_region_counts_what_became_of_each_request() -> None:
    with region_on_loopback(faults={"error_share": 0.5, "seed": 3}, rpm=6) as (port, _), \
            httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
        statuses = [client.post("/v1/chat/completions", json=ASK).status_code for _ in range(20)]
        counted = client.get("/sim/stats").json()["requests"]
        assert counted == {"received": 20, "failed": statuses.count(500), "refused": statuses.count(429),
                           "answered": statuses.count(200)}
        assert counted["answered"] == 6 and counted["failed"] and counted["refused"]
        client.delete("/sim/stats")
        assert client.get("/sim/stats").json()["requests"] == {}


def test_a_client_that_leaves_a_stall_is_counted_as_abandoned() -> None:
    with region_on_loopback(faults={"stall_share": 1, "stall_s": 5}) as (port, _):
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=ASK, timeout=0.3)

        def counted() -> dict[str, int]:
            return httpx.get(f"http://127.0.0.1:{port}/sim/stats").json()["requests"]

        # the region notices the connection closing
        wait_until(lambda: "abandoned" in counted(), "the region to count the request abandoned")
        assert counted() == {"received": 1, "abandoned": 1}
