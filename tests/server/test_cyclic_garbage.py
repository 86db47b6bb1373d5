"""A request leaves nothing of the gateway's own for the cycle collector: what it built (the reply, the relay,
the flight that captured the answer) is freed by reference counting the moment it ends. The gateway runs
full collections rarely (server/app.py), so a cycle here holds a whole answer for minutes: in the soak a
stream's reply and its heartbeat, each pointing at the other, kept 500 KB answers until resident memory
had grown by a gigabyte an hour.

The gateway runs in this process (a real uvicorn on loopback, in a thread) so that the collector's garbage
can be looked at; the test upstream is the usual one, the client httpx."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import uvicorn

from conftest import ADMIN, CLIENT_KEY, gateway_settings
from firsttoken.config import Settings
from firsttoken.server.app import create_app
from support.gateway_process import free_port
from support.soak import request, sample
from support.waiting import wait_until

HEADERS = {"authorization": f"Bearer {CLIENT_KEY}"}
ROUTES = ("chat", "messages", "responses")


@pytest.fixture
def in_process_gateway(upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.chdir(tmp_path)
    settings = gateway_settings(upstream.url)
    settings["cache"] = {"backend": "memory", "semantic": False}  # answers captured, kept and replayed
    settings["models"]["slow"] = ["fake/slow-stream"]  # streams long enough to join, and to leave
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(Settings.model_validate(settings)), host="127.0.0.1",
                                           port=port, loop="uvloop", lifespan="on", log_level="warning"))
    threshold = gc.get_threshold()
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), "the gateway to start", poll_s=0.05)
    assert server.started, "the gateway did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)
        gc.unfreeze()  # what the gateway's start-up froze and tuned is this test process's
        gc.set_threshold(*threshold)


def ask_everything(url: str) -> None:
    """Whole answers and streams on every route, a repeat answered by the cache, identical streams joined
    into one flight, and a stream its client leaves early."""
    idle = sample(url, ADMIN, 0).tasks
    with httpx.Client(base_url=url, headers=HEADERS, timeout=30) as http:
        for route in ROUTES:
            for stream in (False, True):
                for _ in range(2):  # the second is a cache hit
                    path, body = request(route, f"garbage {route} {stream}", stream)
                    response = http.post(path, json=body)
                    assert response.status_code == 200, response.text
            joined = request(route, f"joined {route}", True, slow=True)
            with ThreadPoolExecutor(3) as pool:
                answers = pool.map(lambda ask: http.post(ask[0], json=ask[1]), [joined] * 3)
                assert [r.status_code for r in answers] == [200] * 3
            path, body = request(route, f"left early {route}", True, slow=True)
            with http.stream("POST", path, json=body) as response:
                next(response.iter_raw())
    # Until the abandoned streams are let go, what they built is in use, not garbage: nothing to look at.
    wait_until(lambda: sample(url, ADMIN, 0).tasks <= idle, "the gateway's tasks back to idle")


def test_a_request_leaves_no_cycle_of_the_gateways_own(in_process_gateway: str) -> None:
    gc.collect()  # what came before: not this test's
    ask_everything(in_process_gateway)
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        garbage = list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    ours = sorted({f"{type(o).__module__}.{type(o).__qualname__}" for o in garbage
                   if type(o).__module__.startswith("firsttoken")})
    assert not ours, f"left to the cycle collector: {ours}"
