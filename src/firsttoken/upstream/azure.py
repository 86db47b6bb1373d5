"""Azure OpenAI: the OpenAI wire format behind deployment URLs, an `api-key` header and `api-version`.

The model a client names is the deployment name. `url` is the resource endpoint, for example
https://myresource.openai.azure.com.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import orjson

from firsttoken.upstream.adapter import Adapter, UpstreamRequest
from firsttoken.upstream.openai import with_model

DEFAULT_API_VERSION = "2024-10-21"


class AzureAdapter(Adapter):
    api = "azure"
    probe_lists_models = False  # it lists base models, not the deployments clients name

    def __init__(self, name: str, settings: Any) -> None:
        super().__init__(name, settings)
        self.api_version = settings.api_version or DEFAULT_API_VERSION
        auth = {"api-key": self._secret} if self._secret else {}
        self._json_headers = self._headers(auth)
        self._auth = {**self.settings.headers, **auth}

    def _deployment_url(self, deployment: str, operation: str) -> str:
        return (f"{self.settings.url}/openai/deployments/{quote(deployment, safe='')}/{operation}"
                f"?api-version={self.api_version}")

    def chat(self, body: dict[str, Any], model: str, stream: bool) -> UpstreamRequest:
        payload = with_model(body, model, stream, self.settings.stream_usage)
        return UpstreamRequest(self._deployment_url(model, "chat/completions"), self._json_headers, payload)

    def embeddings(self, body: dict[str, Any], model: str) -> UpstreamRequest:
        return UpstreamRequest(self._deployment_url(model, "embeddings"), self._json_headers,
                               orjson.dumps({**body, "model": model}))

    def probe(self) -> tuple[str, dict[str, str]]:
        return f"{self.settings.url}/openai/models?api-version={self.api_version}", self._auth
