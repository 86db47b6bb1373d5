"""The OpenAI wire format: OpenAI itself and every compatible server (Groq, Together, Fireworks,
OpenRouter, DeepSeek, Mistral, Gemini's compatible endpoint, vLLM, Ollama, llama.cpp)."""

from __future__ import annotations

from typing import Any

import orjson

from firsttoken.upstream.adapter import Adapter, UpstreamRequest


def with_model(body: dict[str, Any], model: str, stream: bool, ask_usage: bool) -> bytes:
    """The client's body, every field kept, with the resolved model and (for streams) usage asked for."""
    out = dict(body)
    out["model"] = model
    if stream and ask_usage:
        options = body.get("stream_options")
        out["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return orjson.dumps(out)


class OpenAIAdapter(Adapter):
    api = "openai"

    def __init__(self, name: str, settings: Any) -> None:
        super().__init__(name, settings)
        auth = {"Authorization": f"Bearer {self._secret}"} if self._secret else {}
        self._json_headers = self._headers(auth)
        self._auth = {**self.settings.headers, **auth}

    def chat(self, body: dict[str, Any], model: str, stream: bool) -> UpstreamRequest:
        return UpstreamRequest(f"{self.settings.url}/chat/completions", self._json_headers,
                               with_model(body, model, stream, self.settings.stream_usage))

    def embeddings(self, body: dict[str, Any], model: str) -> UpstreamRequest:
        return UpstreamRequest(f"{self.settings.url}/embeddings", self._json_headers,
                               orjson.dumps({**body, "model": model}))

    def probe(self) -> tuple[str, dict[str, str]]:
        return f"{self.settings.url}/models", self._auth
