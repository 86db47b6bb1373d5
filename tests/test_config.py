"""Settings: validation that names the key, ${ENV} expansion, auto-configuration from provider variables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from firsttoken import config
from firsttoken.config import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "firsttoken.yaml"
    path.write_text(text)
    return path


def test_full_example_loads(tmp_path: Path) -> None:
    path = write(tmp_path, """
listen: {host: 127.0.0.1, port: 8787}
location: lagos
upstreams:
  openai: {url: "https://api.openai.com/v1", api: openai, key: "${OPENAI_API_KEY}", region: "aws:us-east-1"}
  local-sim: {url: "http://127.0.0.1:9001/v1", api: openai}
models:
  chat: [openai/gpt-4o-mini, local-sim/llama-3.1-8b]
keys:
  - {name: app, key: "${APP_KEY}"}
cache: {backend: sqlite, path: firsttoken-cache.db, semantic: true, ttl: 86400}
""")
    settings = config.load(path, environ={"OPENAI_API_KEY": "sk-test-1234", "APP_KEY": "app-key-123456"})
    assert settings.upstreams["openai"].key.get_secret_value() == "sk-test-1234"
    assert settings.models["chat"] == ["openai/gpt-4o-mini", "local-sim/llama-3.1-8b"]
    assert settings.keys[0].name == "app" and settings.source == str(path)
    assert "sk-test-1234" not in repr(settings)  # secrets stay out of reprs and so out of logs


@pytest.mark.parametrize("text, expected", [
    ("upstrems: {}", "unknown key 'upstrems'"),
    ("upstreams: {a: {url: 'http://x', apii: openai}}", "unknown key 'upstreams.a.apii'"),
    ("upstreams: {a: {url: 'http://x', api: opnai}}", "upstreams.a.api"),
    ("upstreams: {a: {url: 'ftp://x'}}", "upstreams.a.url: must be an http:// or https:// URL"),
    ("listen: {port: 99999}", "listen.port"),
    ("upstreams: {a: {url: 'http://x'}}\nmodels: {chat: [b/m]}", "names upstream 'b'"),
    ("upstreams: {a: {url: 'http://x'}}\nmodels: {chat: [just-a-model]}", "must be 'upstream/model'"),
    ("upstreams: {a: {api: openai}}", "upstreams.a.url: required key is missing"),
    ("keys: [{name: app, key: short}]", "keys.0.key: must be at least 8 characters"),
    ("- a list", "the top level must be a mapping"),
    ("upstreams: {a: {url: 'http://x', key: '${NOT_SET_ANYWHERE}'}}",
     "upstreams.a.key: environment variable NOT_SET_ANYWHERE is not set"),
])
def test_errors_name_the_key(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        config.load(write(tmp_path, text), environ={})
    assert expected in str(info.value)


def test_unknown_key_lists_known_keys(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        config.load(write(tmp_path, "upstreams: {a: {url: 'http://x', timeouts: {frist_byte: 3}}}"), environ={})
    assert "frist_byte" in str(info.value) and "first_byte" in str(info.value)


def test_public_url_drops_credentials_and_query() -> None:
    upstream = config.Upstream(url="https://user:secret@example.test/v1?token=abc")
    assert upstream.public_url == "https://example.test/v1"


def test_env_default(tmp_path: Path) -> None:
    settings = config.load(write(tmp_path, "upstreams: {a: {url: '${BASE:-http://127.0.0.1:1}/v1'}}"), environ={})
    assert settings.upstreams["a"].url == "http://127.0.0.1:1/v1"


def test_autoconfiguration_from_provider_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    environ = {"OPENAI_API_KEY": "sk-a", "ANTHROPIC_API_KEY": "sk-b", "GROQ_API_KEY": "g",
               "OPENROUTER_API_KEY": "o", "TOGETHER_API_KEY": "t", "MISTRAL_API_KEY": "m",
               "DEEPSEEK_API_KEY": "d", "GEMINI_API_KEY": "ge"}
    settings = config.load(None, environ=environ)
    assert settings.source == "environment"
    assert set(settings.upstreams) == {"openai", "anthropic", "groq", "openrouter", "together", "mistral",
                                       "deepseek", "gemini"}
    assert settings.upstreams["anthropic"].api == "anthropic"
    assert settings.upstreams["gemini"].url.endswith("/v1beta/openai")
    assert config.load(None, environ={}).upstreams == {}


def run_serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "firsttoken", "serve", *args], cwd=tmp_path, text=True,
                          capture_output=True, timeout=30, env={"PATH": "/usr/bin:/bin", **(env or {})})


def test_serve_refuses_config_errors(tmp_path: Path) -> None:
    write(tmp_path, "upstreams: {a: {url: 'http://x', apii: openai}}")
    result = run_serve(tmp_path, "--config", "firsttoken.yaml")
    assert result.returncode == 2 and "unknown key 'upstreams.a.apii'" in result.stderr


def test_serve_refuses_open_public_bind_without_keys(tmp_path: Path) -> None:
    write(tmp_path, "upstreams: {a: {url: 'http://127.0.0.1:9/v1'}}")
    result = run_serve(tmp_path, "--config", "firsttoken.yaml", "--host", "0.0.0.0")
    assert result.returncode == 2 and "refusing to listen on 0.0.0.0 without client keys" in result.stderr
