"""Azure OpenAI through the gateway: deployment URLs, the api-key header and api-version."""

from __future__ import annotations

import openai
import pytest

from conftest import CLIENT_KEY
from support.gateway_process import GatewayProcess
from support.openai_upstream import UPSTREAM_KEY, UpstreamThread

USER = [{"role": "user", "content": "hello Azure"}]


@pytest.fixture(scope="module")
def azure():
    with UpstreamThread() as server:
        yield server


@pytest.fixture(scope="module")
def client(azure, tmp_path_factory):
    base = azure.url.removesuffix("/v1")  # the resource endpoint, as Azure gives it
    settings = {"upstreams": {"az": {"url": base, "api": "azure", "key": UPSTREAM_KEY, "api_version": "2024-10-21",
                                     "models": ["echo", "tools"]}},
                "models": {"chat": ["az/echo"]}, "keys": [{"name": "app", "key": CLIENT_KEY}]}
    with GatewayProcess(settings, tmp_path_factory.mktemp("azure")) as gateway:
        yield openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)


def test_deployment_url_key_and_version(client, azure) -> None:
    assert client.chat.completions.create(model="chat", messages=USER).choices[0].message.content == "echo: hello Azure"
    assert azure.stats.last_path == "/openai/deployments/echo/chat/completions?api-version=2024-10-21"
    assert azure.stats.bad_auth == 0


def test_streaming_and_bare_deployment_name(client) -> None:
    stream = client.chat.completions.create(model="echo", messages=USER, stream=True)  # listed under models:
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "echo: hello Azure"


def test_embeddings_on_a_deployment(client, azure) -> None:
    assert len(client.embeddings.create(model="az/embedder", input="x").data) == 1
    assert azure.stats.last_path == "/openai/deployments/embedder/embeddings?api-version=2024-10-21"
