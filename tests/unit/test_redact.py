"""Credentials kept out of what the gateway says: whole, or as a long prefix, in bytes, text and log records."""

from __future__ import annotations

import base64
import logging

import pytest

from firsttoken import config
from firsttoken.redact import MIN_PREFIX, REDACTED, Redactor, redact_logs

KEY = "sk-proj-a1B2c3D4e5F6g7H8i9J0"


@pytest.mark.parametrize("quoted", [KEY, KEY[:MIN_PREFIX], KEY[:20] + "...", f"Bearer {KEY}"])
def test_the_key_and_any_long_prefix_of_it_are_removed(quoted: str) -> None:
    text = f"Incorrect API key provided: {quoted}. See https://platform.example/account."
    cleaned = Redactor([KEY]).text(text)
    assert KEY[:MIN_PREFIX] not in cleaned and REDACTED in cleaned
    assert cleaned.endswith("See https://platform.example/account.")  # the rest is untouched


def test_short_prefixes_and_short_secrets_are_left_alone() -> None:
    assert Redactor([KEY]).text("keys look like sk-proj-…") == "keys look like sk-proj-…"
    assert Redactor(["EMPTY"]).text("EMPTY answers are EMPTY") == "EMPTY answers are EMPTY"


def test_every_occurrence_of_every_secret_goes() -> None:
    other = "another-credential-0987654321"
    data = f"{KEY} and {other} and {KEY}".encode()
    assert Redactor([KEY, other]).bytes(data) == f"{REDACTED} and {REDACTED} and {REDACTED}".encode()


def test_no_log_record_carries_a_secret(caplog: pytest.LogCaptureFixture) -> None:
    redact_logs([KEY])
    log = logging.getLogger("firsttoken.test")
    with caplog.at_level(logging.INFO):
        log.info("upstream said %s", f"bad key {KEY}")
        try:
            raise ValueError(f"the key {KEY[:15]} is wrong")
        except ValueError:
            log.exception("failed")
    assert KEY[:MIN_PREFIX] not in caplog.text and REDACTED in caplog.text


def test_the_settings_name_every_credential_they_hold() -> None:
    settings = config.validate({
        "upstreams": {"a": {"url": "https://user:url-password-123@api.example/v1?api_key=query-secret-456",
                            "key": "upstream-key-789", "headers": {"X-Api-Token": "header-token-000",
                                                                   "HTTP-Referer": "https://myapp.example"}}},
        "keys": [{"name": "app", "key": "client-key-1234"}],
        "limits": {"redis": "redis://:redis-password-1@127.0.0.1:6379/0"}})
    basic = base64.b64encode(b"user:url-password-123").decode()  # what the HTTP client sends for the user info
    assert set(settings.secrets()) == {"url-password-123", basic, "query-secret-456", "upstream-key-789",
                                       "header-token-000", "client-key-1234", "redis-password-1",
                                       base64.b64encode(b":redis-password-1").decode()}


def test_a_credential_header_counts_without_its_scheme() -> None:
    upstream = config.Upstream(url="http://up.example/v1", headers={"Authorization": "Bearer tok-0123456789abc"})
    redactor = Redactor(upstream.secrets())
    assert redactor.text("Incorrect API key provided: tok-0123456789abc") == f"Incorrect API key provided: {REDACTED}"


@pytest.mark.parametrize("spelled", [
    KEY.replace("-", "\\u002d"),  # JSON may write any character as an escape
    KEY.replace("p", "\\u0070").replace("B", "\\u0042"),
    "".join(f"%{b:02x}" for b in KEY.encode()),  # %-encoded, in a URL
    KEY[:12].replace("-", "%2D") + "…",
])
def test_an_escaped_key_is_found_in_every_spelling(spelled: str) -> None:
    cleaned = Redactor([KEY]).text(f'{{"message": "bad key {spelled} given"}}')
    assert cleaned == f'{{"message": "bad key {REDACTED}{"…" if spelled.endswith("…") else ""} given"}}'


def test_a_slash_escaped_as_json_allows_is_found() -> None:
    key = "base64/like+key/0123456789abcdef"
    assert Redactor([key]).text(key.replace("/", "\\/")) == REDACTED


@pytest.mark.parametrize("spelled", [
    KEY.replace("-", "\\\\u002d"),  # JSON inside JSON: a proxy wrapped the error body as a string
    KEY.replace("-", "%252D"),  # a URL inside a URL
    KEY.replace("-", "&#45;"),  # an HTML error page
    KEY.replace("-", "&#x2D;"),
])
def test_escapes_of_escapes_and_html_references_are_found(spelled: str) -> None:
    assert Redactor([KEY]).text(f"key {spelled}.") == f"key {REDACTED}."


def test_text_with_only_newlines_escaped_is_left_as_it_was() -> None:
    text = 'data: {"content": "line one\\nline two"}'
    assert Redactor([KEY]).text(text) == text


@pytest.mark.parametrize("spelled", [KEY.replace("-", "&dash;"), KEY.replace("-", "&amp;#45;"),
                                     KEY.replace("-", "&amp;amp;#x2d;")])
def test_named_and_escaped_html_references_are_found(spelled: str) -> None:
    assert Redactor([KEY]).text(f"<p>key {spelled}</p>") == f"<p>key {REDACTED}</p>"
