"""The OpenAI wire format: OpenAI itself and every compatible server (Groq, Together, Fireworks,
OpenRouter, DeepSeek, Mistral, Gemini's compatible endpoint, vLLM, Ollama, llama.cpp)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from firsttoken.upstream.adapter import Adapter, UpstreamRequest
from firsttoken.upstream.responses import ResponsesStream, completion


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

    def speaks(self, client_format: str) -> bool:
        return client_format == "responses" and self.settings.responses

    def native(self, body: dict[str, Any], model: str, stream: bool,
               client_headers: Sequence[tuple[bytes, bytes]]) -> UpstreamRequest:
        """A Responses request passed through: hosted tools, encrypted reasoning, `include`, all as written."""
        return UpstreamRequest(f"{self.settings.url}/responses", self._json_headers,
                               orjson.dumps({**body, "model": model}), native=True)

    def stream_translator(self, include_usage: bool, native: bool = False) -> ResponsesStream | None:
        return ResponsesStream(include_usage, self.name) if native else None

    def native_response(self, body: bytes) -> bytes:
        try:
            response = orjson.loads(body)
        except orjson.JSONDecodeError:
            response = None
        if not isinstance(response, dict) or response.get("object") != "response":
            raise self.not_an_answer("a response", body[:200].decode("utf-8", "replace"))
        return orjson.dumps(completion(response))

    def embeddings(self, body: dict[str, Any], model: str) -> UpstreamRequest:
        return UpstreamRequest(f"{self.settings.url}/embeddings", self._json_headers,
                               orjson.dumps({**body, "model": model}))

    def probe(self) -> tuple[str, dict[str, str]]:
        return f"{self.settings.url}/models", self._auth
