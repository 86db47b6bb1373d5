"""kill -9 under write load, twenty times: the gateway's SQLite files (the edge cache, the journey log, the kept
responses) pass `PRAGMA integrity_check` after every crash, the gateway starts again on them and serves, and
what it serves from them is whole: a cached answer replayed after a crash is the answer the upstream gave,
streamed or not, and a kept response still continues its conversation."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from conftest import ADMIN, CLIENT_KEY, gateway_settings
from support.gateway_process import GatewayProcess

CRASHES = 20
CLIENTS = 6
AUTH = {"authorization": f"Bearer {CLIENT_KEY}"}
FILES = ("firsttoken-cache.db", "firsttoken-journeys.db", "firsttoken-responses.db", "firsttoken-spend.db")
# The cache writes what it keeps every 0.2 s (cache/stores.py), in one transaction: an answer older than this
# at the kill was committed, and must be in the file afterwards.
COMMITTED_AFTER_S = 0.6


class Load:
    """Clients that ask new questions as fast as they are answered (each a cache write, a journey and, on the
    Responses route, a kept response) until the gateway is killed under them."""

    def __init__(self, url: str, round_no: int) -> None:
        self.url = url
        self.round_no = round_no
        self.answered: dict[str, tuple[str, float]] = {}  # prompt → (the answer's text, when), before the kill
        self.responses: list[str] = []  # ids of responses completed before the kill
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._ask, args=(i,), daemon=True) for i in range(CLIENTS)]

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(10)

    def _ask(self, client_no: int) -> None:
        with httpx.Client(base_url=self.url, headers=AUTH, timeout=5) as http:
            for n in range(10_000):
                if self.stop.is_set():
                    return
                prompt = f"round {self.round_no} client {client_no} question {n}"
                try:
                    if n % 3 == 2:
                        response = http.post("/v1/responses", json={"model": "chat", "input": prompt})
                        if response.status_code == 200:
                            self.responses.append(response.json()["id"])
                        continue
                    response = http.post("/v1/chat/completions", json={
                        "model": "chat", "stream": n % 2 == 1, "messages": [{"role": "user", "content": prompt}]})
                    if response.status_code == 200:
                        self.answered[prompt] = answer_text(response), time.monotonic()
                except httpx.HTTPError:  # killed under us
                    return


def answer_text(response: httpx.Response) -> str:
    """The text of a whole answer, or of a stream read to its end ([DONE] and a finish reason required)."""
    if not response.headers["content-type"].startswith("text/event-stream"):
        choice = response.json()["choices"][0]
        assert choice["finish_reason"], response.text
        return choice["message"]["content"]
    text, finished, done = "", False, False
    for line in response.text.splitlines():
        if line == "data: [DONE]":
            done = True
        elif line.startswith("data: "):
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                text += choice.get("delta", {}).get("content") or ""
                finished = finished or bool(choice.get("finish_reason"))
    assert finished and done, response.text
    return text


def integrity(path: Path) -> str:
    with sqlite3.connect(path) as db:
        return db.execute("PRAGMA integrity_check").fetchone()[0]


@pytest.mark.timeout(600)
def test_kill_9_under_write_load_twenty_times(upstream, tmp_path: Path) -> None:
    settings = {k: v for k, v in gateway_settings(upstream.url).items() if k != "cache"}  # the default cache
    settings["cache"] = {"semantic": False}  # exact answers are what a crash could tear; the index is memory
    rng = random.Random(7)
    continued = 0
    committed: list[tuple[str, str]] = []  # of the round before: answers written to the cache before the kill
    recent: list[tuple[str, str]] = []  # and answers that may not have been
    earlier_responses: list[str] = []
    for round_no in range(CRASHES):
        with GatewayProcess(settings, tmp_path) as gateway:
            served_whole_after_the_crash(gateway, committed, recent)
            continued += continues(gateway, earlier_responses)
            with Load(gateway.url, round_no) as load:
                time.sleep(rng.uniform(1.0, 1.6))
                assert gateway.process is not None
                killed_at = time.monotonic()
                gateway.process.kill()  # SIGKILL: no shutdown, whatever was being written is cut
                gateway.process.wait()
            answered = list(load.answered.items())
            committed = [(p, text) for p, (text, at) in answered if at < killed_at - COMMITTED_AFTER_S][-4:]
            recent = [(p, text) for p, (text, at) in answered if at >= killed_at - COMMITTED_AFTER_S][-4:]
            earlier_responses = load.responses
            assert committed, f"round {round_no}: too little was answered before the kill:\n{gateway.log()}"
        for name in FILES:
            assert integrity(tmp_path / name) == "ok", (round_no, name)
    assert continued >= CRASHES // 2, continued  # most rounds continued a response kept in the round before
    summary = subprocess.run([sys.executable, "-m", "firsttoken", "journeys", "--log",
                              str(tmp_path / "firsttoken-journeys.db"), "--json"],
                             capture_output=True, text=True, timeout=60)
    assert summary.returncode == 0, summary.stderr  # the journey log reads whole after twenty crashes
    assert json.loads(summary.stdout)


def served_whole_after_the_crash(gateway: GatewayProcess, committed: list[tuple[str, str]],
                                 recent: list[tuple[str, str]]) -> None:
    """Ask again, whole and streamed, what was answered before the kill. Answers committed before it come from
    the cache; the most recent may or may not (asked again then); every one is the upstream's answer, whole."""
    with httpx.Client(base_url=gateway.url, headers=AUTH, timeout=10) as http:
        for i, (prompt, text) in enumerate(committed + recent):
            response = http.post("/v1/chat/completions", json={
                "model": "chat", "stream": i % 2 == 1, "messages": [{"role": "user", "content": prompt}]})
            assert response.status_code == 200, response.text
            assert answer_text(response) == text
            if i < len(committed):
                assert response.headers["x-firsttoken-cache"] == "hit", (prompt, response.headers)
        assert http.get("/v1/journeys?limit=5", headers=ADMIN).status_code == 200


def continues(gateway: GatewayProcess, responses: list[str]) -> int:
    """The last response kept before the kill continues its conversation (or, not yet written, is a clear
    404); returns 1 when it continued."""
    if not responses:
        return 0
    response = httpx.post(f"{gateway.url}/v1/responses", headers=AUTH, timeout=10, json={
        "model": "chat", "input": "and then?", "previous_response_id": responses[-1], "store": False})
    assert response.status_code in (200, 404), response.text
    if response.status_code == 404:
        assert response.json()["error"]["code"] == "previous_response_not_found"
    return 1 if response.status_code == 200 else 0
