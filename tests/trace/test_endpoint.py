"""What trace makes of a URL: the wire format, where the chat request goes, the key, the region."""

from __future__ import annotations

import pytest

from firsttoken.geo.places import GeoError
from firsttoken.trace.endpoint import EndpointError, endpoint


@pytest.mark.parametrize("url, api, chat_url", [
    ("https://api.openai.com/v1", "openai", "https://api.openai.com/v1/chat/completions"),
    ("https://api.openai.com/v1/", "openai", "https://api.openai.com/v1/chat/completions"),
    ("https://api.openai.com/v1/chat/completions", "openai", "https://api.openai.com/v1/chat/completions"),
    ("https://api.anthropic.com", "anthropic", "https://api.anthropic.com/v1/messages"),
    ("https://api.anthropic.com/v1", "anthropic", "https://api.anthropic.com/v1/messages"),
    ("http://127.0.0.1:9001/v1/messages", "anthropic", "http://127.0.0.1:9001/v1/messages"),
    ("http://127.0.0.1:9001/v1", "openai", "http://127.0.0.1:9001/v1/chat/completions"),
])
def test_the_wire_format_and_the_chat_url(url: str, api: str, chat_url: str, monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    target = endpoint(url)
    assert (target.api, target.chat_url) == (api, chat_url)


def test_known_apis_have_a_region_and_others_take_one(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert endpoint("https://api.openai.com/v1").region.code == "api:openai"
    assert endpoint("http://10.0.0.2:9001/v1").region is None
    assert endpoint("http://10.0.0.2:9001/v1", region="aws:eu-west-1").region.code == "aws:eu-west-1"
    with pytest.raises(GeoError, match="Closest known: aws:eu-west-1"):
        endpoint("http://10.0.0.2:9001/v1", region="aws:eu-wset-1")


def test_the_key_goes_in_the_header_its_api_expects_and_is_redacted(monkeypatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-secret-123")
    openai = endpoint("https://api.openai.com/v1", key_env="MY_KEY")
    anthropic = endpoint("https://api.anthropic.com", key_env="MY_KEY")
    assert openai.headers()["authorization"] == "Bearer sk-secret-123"
    assert anthropic.headers()["x-api-key"] == "sk-secret-123" and "authorization" not in anthropic.headers()
    assert openai.redact("Incorrect API key provided: sk-secret-123.") == "Incorrect API key provided: [key]."
    assert openai.body("m", "hi", 8)["stream_options"] == {"include_usage": True}
    assert "stream_options" not in anthropic.body("m", "hi", 8)


@pytest.mark.parametrize("url", ["ftp://example.com/v1", "api.openai.com/v1", "https:///v1"])
def test_urls_trace_cannot_use(url: str) -> None:
    with pytest.raises(EndpointError, match="http"):
        endpoint(url)


def test_a_named_key_variable_must_be_set(monkeypatch) -> None:
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(EndpointError, match="NOT_SET_ANYWHERE"):
        endpoint("https://api.openai.com/v1", key_env="NOT_SET_ANYWHERE")
