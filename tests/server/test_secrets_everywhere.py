"""No key reaches anything the gateway writes or says. One gateway with everything on (the edge cache, the
journey log, kept responses, the access log, OTLP export, the dashboard) is asked on every route, with the
right keys, wrong ones and an upstream that quotes the key it was sent; then every file it wrote (databases
with their -wal files, byte for byte), its log, every span the collector received, and every answer of every
operator's route are searched for each key: plain, base64, %-encoded or JSON-escaped."""

from __future__ import annotations

import base64
import contextlib
import json
import sqlite3
from pathlib import Path
from urllib.parse import quote, unquote

import httpx

from conftest import ADMIN, ADMIN_KEY, CLIENT_KEY, OTHER_CLIENT_KEY
from support.faulty_answers import UPSTREAM_KEY
from support.gateway_process import GatewayProcess
from support.otlp_collector import collector
from support.threaded import InThread
from support.waiting import wait_until

COLLECTOR_KEY = "otlp-ingest-key-for-the-secrets-test"
WRONG_KEY = "sk-a-client-mistyped-its-key-0000"  # sent by a client, known to nobody: never written either
SECRETS = {"upstream key": UPSTREAM_KEY, "client key": CLIENT_KEY, "other client key": OTHER_CLIENT_KEY,
           "admin key": ADMIN_KEY, "collector key": COLLECTOR_KEY, "mistyped key": WRONG_KEY}
LEAKING_MODELS = ["key-in-answer", "key-in-stream", "key-in-headers", "key-escaped", "key-urlencoded"]


def spellings(secret: str) -> list[bytes]:
    """The ways a key could be written down: as it is, base64, %-encoded, JSON-escaped (and its first 10
    characters, which the gateway treats as the key wherever they are found)."""
    plain = secret.encode()
    return [plain, plain[:10], base64.b64encode(plain), quote(secret, safe="").encode(),
            json.dumps(secret).encode()[1:-1].replace(b"-", b"\\u002d")]


def logged(journey_log: Path) -> set[str]:
    """The request ids the journey log's file holds (a reader beside the gateway's writer: WAL)."""
    with contextlib.closing(sqlite3.connect(journey_log, timeout=10)) as db:
        return {request_id for (request_id,) in db.execute("SELECT id FROM journeys")}


def ask_everything(url: str, journey_log: Path) -> list[bytes]:
    """Every route, as clients and the operator would ask it; what each answer said (headers and body)."""
    said = []
    client = {"authorization": f"Bearer {CLIENT_KEY}"}

    def keep(response: httpx.Response) -> None:
        said.append(str(response.headers).encode() + response.content)

    with httpx.Client(base_url=url, timeout=15) as http:
        for model in ["chat", *LEAKING_MODELS]:
            for stream in (False, True):
                body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": f"hi {model}"}]}
                keep(http.post("/v1/chat/completions", json=body, headers=client))
                keep(http.post("/v1/messages", json={**body, "max_tokens": 50},
                               headers={"x-api-key": OTHER_CLIENT_KEY, "anthropic-version": "2023-06-01"}))
                keep(http.post("/v1/responses", json={"model": model, "stream": stream, "input": f"hi {model}"},
                               headers=client))
        keep(http.post("/v1/messages/count_tokens", headers=client,
                       json={"model": "chat", "messages": [{"role": "user", "content": "count me"}]}))
        keep(http.post("/v1/embeddings", json={"model": "chat", "input": "embed me"}, headers=client))
        for wrong in ({"authorization": f"Bearer {WRONG_KEY}"}, {"x-api-key": WRONG_KEY}, {"api-key": WRONG_KEY}):
            keep(http.post("/v1/chat/completions", headers=wrong,
                           json={"model": "chat", "messages": [{"role": "user", "content": "let me in"}]}))
            keep(http.get("/metrics", headers=wrong))
        # The operator's routes read the journeys back, the history from the log's file: once it has them all.
        listed = {j["request_id"] for j in http.get("/v1/journeys?limit=1000", headers=ADMIN).json()["data"]}
        wait_until(lambda: listed <= logged(journey_log), "every journey in the journey log")
        for path in ("/metrics", "/v1/journeys?limit=1000", "/v1/routing", "/v1/models", "/openapi.json",
                     "/dashboard/api/state", "/dashboard/api/recent", "/dashboard/api/history", "/readyz"):
            keep(http.get(path, headers=ADMIN))
            keep(http.get(path, headers=client))
        for journey in http.get("/v1/journeys?limit=1000", headers=ADMIN).json()["data"]:
            keep(http.get(f"/v1/journeys/{journey['request_id']}", headers=ADMIN))
    return said


def test_no_key_in_anything_the_gateway_wrote_or_said(upstream, tmp_path: Path) -> None:
    with InThread(collector) as received:
        settings = {
            "upstreams": {"fake": {"url": upstream.url, "key": UPSTREAM_KEY, "timeouts": {"first_byte": 5.0}}},
            "models": {"chat": ["fake/echo"], **{m: [f"fake/{m}"] for m in LEAKING_MODELS}},
            "keys": [{"name": "app", "key": CLIENT_KEY}, {"name": "other", "key": OTHER_CLIENT_KEY}],
            "admin_key": ADMIN_KEY,
            "routing": {"hedge": {"enabled": False}, "retry_budget": 0},
            "journeys": {"otlp": {"endpoint": received.url, "headers": {"x-ingest-key": COLLECTOR_KEY}}},
        }
        with GatewayProcess(settings, tmp_path, args=["--access-log"]) as gateway:
            said = ask_everything(gateway.url, tmp_path / "firsttoken-journeys.db")
            wait_until(lambda: len(received.spans) >= 20, "spans enough to search at the collector")
        spans = [span.SerializeToString() for span in received.spans]
    written = {str(path.relative_to(tmp_path)): path.read_bytes() for path in tmp_path.rglob("*")
               if path.is_file() and path.name != "firsttoken.yaml"}  # the config holds them, as given
    assert {"firsttoken-cache.db", "firsttoken-journeys.db", "firsttoken-responses.db", "gateway.log"} <= set(written)
    places = {**{f"the file {name}": data for name, data in written.items()},
              **{f"span {i}": data for i, data in enumerate(spans)},
              **{f"answer {i}": data for i, data in enumerate(said)}}
    assert b"[redacted]" in b"".join(said)  # the upstream did quote its key, and it was taken out
    for where, data in places.items():
        decoded = unquote(data.decode("latin-1")).encode("latin-1", "replace")
        for name, secret in SECRETS.items():
            for spelling in spellings(secret):
                assert spelling not in data and spelling not in decoded, f"the {name} ({spelling!r}) in {where}"
