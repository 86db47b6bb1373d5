"""What `firsttoken trace URL` talks to: the wire format, where to POST, how to authenticate, and
where the endpoint's GPUs are (for the floor) when it is a well-known API."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from firsttoken.geo.places import Place, regions, resolve

Api = Literal["openai", "anthropic"]

# The serving region each well-known API's traffic lands in (regions.csv, `api:` rows). An approximation:
# these APIs front several regions; the floor to their main one is still the bound a caller should expect.
KNOWN_HOSTS: dict[str, str] = {
    "api.openai.com": "api:openai",
    "api.anthropic.com": "api:anthropic",
    "api.groq.com": "api:groq",
    "api.mistral.ai": "api:mistral",
    "generativelanguage.googleapis.com": "api:gemini",
    "api.together.xyz": "api:together",
    "api.fireworks.ai": "api:fireworks",
    "openrouter.ai": "api:openrouter",
    "api.deepseek.com": "api:deepseek",
    "api.x.ai": "api:xai",
    "api.perplexity.ai": "api:perplexity",
    "api.cohere.com": "api:cohere",
    "api.cohere.ai": "api:cohere",
}
DEFAULT_KEY_ENV: dict[Api, str] = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
ANTHROPIC_VERSION = "2023-06-01"


class EndpointError(ValueError):
    """A URL or option that trace cannot use; the message says what to change."""


@dataclass(frozen=True)
class Endpoint:
    api: Api
    base: str          # the API root, as given: https://api.openai.com/v1
    chat_url: str      # where the chat request goes
    host: str
    key: str | None    # never printed; see `redact`
    region: Place | None

    def headers(self) -> dict[str, str]:
        # A trace measures the way to the model: a cache on the way (a gateway's) is asked to let it through.
        headers = {"content-type": "application/json", "accept": "text/event-stream", "cache-control": "no-cache"}
        if self.api == "anthropic":
            headers["anthropic-version"] = ANTHROPIC_VERSION
            if self.key:
                headers["x-api-key"] = self.key
        elif self.key:
            headers["authorization"] = f"Bearer {self.key}"
        return headers

    def body(self, model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": True,
                                "messages": [{"role": "user", "content": prompt}]}
        if self.api == "openai":
            body["stream_options"] = {"include_usage": True}  # the provider's own token count
        return body

    def models_url(self) -> str:
        return self.base.rstrip("/") + "/models"

    def redact(self, text: str) -> str:
        """`text` with the API key blanked out: providers quote a wrong key back in their errors."""
        return text.replace(self.key, "[key]") if self.key else text


def endpoint(url: str, *, api: Api | None = None, key_env: str | None = None, region: str | None = None) -> Endpoint:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EndpointError(f"{url!r} is not an http(s) URL; give the API's base, e.g. https://api.openai.com/v1")
    host = parts.hostname.lower()
    path = parts.path.rstrip("/")
    if api is None:
        api = "anthropic" if host.endswith("anthropic.com") or path.endswith("/messages") else "openai"
    for tail in ("/chat/completions", "/messages"):
        if path.endswith(tail):
            path = path[: -len(tail)]
    base = f"{parts.scheme}://{parts.netloc}{path}"
    if api == "anthropic" and not path.endswith("/v1"):
        base += "/v1"  # the Anthropic SDK's base URL has no /v1; its API does
    chat_url = base + ("/messages" if api == "anthropic" else "/chat/completions")
    key = os.environ.get(key_env or DEFAULT_KEY_ENV[api]) or None
    if key_env and key is None:
        raise EndpointError(f"--api-key-env {key_env}: that environment variable is not set")
    place = resolve(region) if region else (regions().get(KNOWN_HOSTS[host]) if host in KNOWN_HOSTS else None)
    return Endpoint(api, base, chat_url, host, key, place)
