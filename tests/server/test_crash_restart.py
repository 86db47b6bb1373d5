"""kill -9 under write load, again and again (FIRSTTOKEN_CRASHES, 6 in CI; 20 or more by hand): the gateway's
SQLite files (the edge cache, the journey log, the kept responses) pass `PRAGMA integrity_check` after every
crash, the gateway starts again on them and serves, and what it serves from them is whole: a cached answer
replayed after a crash is the answer the upstream gave, streamed or not, and a kept response still continues
its conversation."""

from __future__ import annotations

import contextlib
import json
import os
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
from support.waiting import wait_until

CRASHES = int(os.environ.get("FIRSTTOKEN_CRASHES", "6"))
CLIENTS = 6
AUTH = {"authorization": f"Bearer {CLIENT_KEY}"}
FILES = ("firsttoken-cache.db", "firsttoken-journeys.db", "firsttoken-responses.db", "firsttoken-spend.db")
REPLAYED = 4  # answers of each kind asked again after a crash


class Load:
    """Clients that ask new questions as fast as they are answered (each a cache write, a journey and, on the
    Responses route, a kept response) until the gateway is killed under them."""

    def __init__(self, url: str, round_no: int) -> None:
        self.url = url
        self.round_no = round_no
        self.answered: dict[str, str] = {}  # prompt → the answer's text, in the order answered, before the kill
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
        with httpx.Client(base_url=self.url, headers=AUTH, timeout=30) as http:  # a kill ends it at once
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
                        self.answered[prompt] = answer_text(response)
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


def stored_text(kind: str, body: bytes) -> str:
    """The text of an answer as the cache file keeps it: the upstream's completion, or its stream's events."""
    if kind == "json":
        return json.loads(body)["choices"][0]["message"]["content"] or ""
    deltas = (json.loads(line[6:]) for line in body.decode().splitlines()
              if line.startswith("data: ") and line != "data: [DONE]")
    return "".join(choice.get("delta", {}).get("content") or "" for chunk in deltas
                   for choice in chunk.get("choices") or [])


def in_the_file(path: Path) -> set[str]:
    """The texts of the answers committed to the cache file: what a reader beside the gateway sees (WAL)."""
    with contextlib.closing(sqlite3.connect(path, timeout=10)) as db:
        return {stored_text(kind, bytes(body)) for kind, body in db.execute("SELECT kind, body FROM answers")}


def integrity(path: Path) -> str:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return db.execute("PRAGMA integrity_check").fetchone()[0]


@pytest.mark.timeout(120 + 30 * CRASHES)
def test_kill_9_under_write_load_again_and_again(upstream, tmp_path: Path) -> None:
    settings = {k: v for k, v in gateway_settings(upstream.url).items() if k != "cache"}  # the default cache
    settings["cache"] = {"semantic": False}  # exact answers are what a crash could tear; the index is memory
    rng = random.Random(7)
    continued = 0
    committed: list[tuple[str, str]] = []  # of the round before: answers seen in the cache file before the kill
    recent: list[tuple[str, str]] = []  # and answers that may not have been written
    earlier_responses: list[str] = []
    for round_no in range(CRASHES):
        with GatewayProcess(settings, tmp_path) as gateway:
            served_whole_after_the_crash(gateway, committed, recent)
            continued += continues(gateway, earlier_responses)
            with Load(gateway.url, round_no) as load:

                def written() -> list[tuple[str, str]]:
                    """The last answers of this round that are in the file, once there are enough (and a
                    response was kept, for the next round to continue)."""
                    answered = list(load.answered.items())
                    texts = in_the_file(tmp_path / "firsttoken-cache.db")
                    found = [(prompt, text) for prompt, text in answered if text in texts][-REPLAYED:]
                    return found if len(found) == REPLAYED and load.responses else []

                committed = wait_until(written, f"round {round_no}: answers in the cache file", poll_s=0.05)
                time.sleep(rng.uniform(0.0, 0.5))  # the kill lands anywhere in the writer's 0.2 s cycle
                assert gateway.process is not None
                gateway.process.kill()  # SIGKILL: no shutdown, whatever was being written is cut
                gateway.process.wait()
            recent = [(p, text) for p, text in load.answered.items() if (p, text) not in committed][-REPLAYED:]
            earlier_responses = load.responses
        for name in FILES:
            assert integrity(tmp_path / name) == "ok", (round_no, name)
    assert continued >= CRASHES // 2, continued  # most rounds continued a response kept in the round before
    summary = subprocess.run([sys.executable, "-m", "firsttoken", "journeys", "--log",
                              str(tmp_path / "firsttoken-journeys.db"), "--json"],
                             capture_output=True, text=True, timeout=60)
    assert summary.returncode == 0, summary.stderr  # the journey log reads whole after every crash
    assert json.loads(summary.stdout)


def served_whole_after_the_crash(gateway: GatewayProcess, committed: list[tuple[str, str]],
                                 recent: list[tuple[str, str]]) -> None:
    """Ask again, whole and streamed, what was answered before the kill. Answers in the file before it come
    from the cache; the most recent may or may not (asked again then); every one is the upstream's answer,
    whole."""
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
