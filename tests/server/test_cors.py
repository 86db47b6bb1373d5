"""CORS for browser apps: off by default; with `cors.origins`, an allowed origin's preflight is answered and
its responses (errors included) carry the headers that let the page read them, the X-ray's among them."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from support.gateway_process import GatewayProcess

APP = "https://app.example.test"
CHAT = {"model": "sim/llama-3.2-1b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def preflight(url: str, origin: str) -> httpx.Response:
    return httpx.options(f"{url}/v1/chat/completions", headers={
        "origin": origin, "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type, x-stainless-os"})


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory):
    settings = {"sim": {"models": ["llama-3.2-1b"]}, "cors": {"origins": [APP + "/", "http://localhost:5173"]}}
    with GatewayProcess(settings, tmp_path_factory.mktemp("cors")) as gateway:
        yield gateway


def test_an_allowed_origin_is_answered(gateway) -> None:
    answer = preflight(gateway.url, APP)
    assert answer.status_code == 204
    assert answer.headers["access-control-allow-origin"] == APP
    assert "POST" in answer.headers["access-control-allow-methods"]
    assert answer.headers["access-control-allow-headers"] == "authorization, content-type, x-stainless-os"
    chat = httpx.post(f"{gateway.url}/v1/chat/completions", json=CHAT, headers={"origin": APP})
    assert chat.status_code == 200 and chat.headers["access-control-allow-origin"] == APP
    assert "server-timing" in chat.headers["access-control-expose-headers"]
    refused = httpx.post(f"{gateway.url}/v1/chat/completions", json={}, headers={"origin": APP})
    assert refused.status_code == 400 and refused.headers["access-control-allow-origin"] == APP


def test_other_origins_get_nothing(gateway) -> None:
    answer = preflight(gateway.url, "https://evil.example.test")
    assert answer.status_code == 405 and "access-control-allow-origin" not in answer.headers
    chat = httpx.post(f"{gateway.url}/v1/chat/completions", json=CHAT, headers={"origin": "https://evil.example.test"})
    assert chat.status_code == 200 and "access-control-allow-origin" not in chat.headers


def test_off_by_default(tmp_path: Path) -> None:
    with GatewayProcess({"sim": {"models": ["llama-3.2-1b"]}}, tmp_path) as gateway:
        answer = preflight(gateway.url, APP)
    assert answer.status_code == 405 and "access-control-allow-origin" not in answer.headers
