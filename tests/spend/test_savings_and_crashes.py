"""What the edge saved, through the real SDK: a cache hit and a joined request cost nothing and record the
tokens, money and seconds their answer cost when it went upstream. And the ledger under SIGKILL: what a
gateway killed right after answering had counted is in the file (at most the last request short of it),
a restart counts nothing twice, and a budget spent before the kill still holds after it."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from conftest import CLIENT_KEY
from support.gateway_process import GatewayProcess
from support.recorded_usage import RecordedUpstream, run_recorded_upstream
from support.spend_ledger import closing_cost, ledger_rows, recorded_gateway_settings
from support.threaded import InThread
from support.waiting import wait_until

GPT_4O_MINI = (86 * 0.15 + 1920 * 0.075 + 300 * 0.6) / 1e6  # test_costs_by_wire: the recorded chat usage
CAPPED_KEY = "capped-client-key-0002"


@pytest.fixture(scope="module")
def upstream() -> Iterator[RecordedUpstream]:
    with InThread(run_recorded_upstream) as server:
        yield server


def fields(value: str) -> dict[str, str]:
    return dict(part.partition("=")[::2] for part in value.split("; "))


def test_a_cache_hit_and_a_joined_request_cost_nothing_and_record_what_they_saved(
        upstream: RecordedUpstream, tmp_path: Path) -> None:
    settings = recorded_gateway_settings(upstream.url, cache={"backend": "memory", "semantic": False})
    with GatewayProcess(settings, tmp_path) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
        ask = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "What is a cable landing?"}]}
        first = client.chat.completions.with_raw_response.create(**ask)
        hit = client.chat.completions.with_raw_response.create(**ask)
        assert (first.headers["x-firsttoken-cache"], hit.headers["x-firsttoken-cache"]) == ("miss", "hit")
        said = fields(hit.headers["x-firsttoken-cost"])
        assert float(said["usd"]) == 0 and said["saved-by"] == "cache" and said["saved-tokens"] == "2306"
        assert float(said["saved-usd"]) == pytest.approx(GPT_4O_MINI, abs=1e-8)
        assert float(said["saved-s"]) >= 0  # the route's measured speed, less the replay's own time
        # two identical requests at once: the first is held upstream, mid-stream, until the second has joined it
        joined = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "And a repeater?"}], "stream": True}
        leader: dict[str, str] = {}

        def lead() -> None:
            with client.chat.completions.with_streaming_response.create(**joined) as response:
                list(response.iter_lines())
                leader.update(response.headers)

        with upstream.gate.shut():
            first_thread = threading.Thread(target=lead)
            first_thread.start()
            wait_until(lambda: upstream.gate.waiting, "the first to be streaming from upstream")
            with client.chat.completions.with_streaming_response.create(**joined) as follower:
                upstream.gate.open()  # its headers are out: it joined
                said = fields(closing_cost(list(follower.iter_lines())))
        first_thread.join(30)
        assert (leader["x-firsttoken-cache"], follower.headers["x-firsttoken-cache"]) == ("miss", "hit; joined")
        assert float(said["usd"]) == 0 and said["saved-by"] == "joined"
        rows = {r["id"]: r for r in ledger_rows(gateway.workdir, at_least=4)}
        hit_row = rows[hit.headers["x-request-id"]]
        assert (hit_row["usd"], hit_row["saved_by"], hit_row["saved_tokens"]) == (0.0, "cache", 2306)
        assert hit_row["saved_usd"] == pytest.approx(GPT_4O_MINI) and hit_row["input_tokens"] == 0
        follower_row = rows[follower.headers["x-request-id"]]
        assert (follower_row["usd"], follower_row["saved_by"]) == (0.0, "joined")
        assert follower_row["saved_usd"] == pytest.approx(GPT_4O_MINI)
        assert sum(r["usd"] for r in rows.values()) == pytest.approx(2 * GPT_4O_MINI)  # two went upstream


def test_spend_survives_sigkill_and_a_restart_counts_nothing_twice(upstream: RecordedUpstream,
                                                                   tmp_path: Path) -> None:
    settings = recorded_gateway_settings(upstream.url)
    settings["keys"].append({"name": "capped", "key": CAPPED_KEY, "budget": {"usd_per_day": 20 * GPT_4O_MINI}})
    answered: list[str] = []
    with GatewayProcess(settings, tmp_path) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CAPPED_KEY, max_retries=0)
        for n in range(19):
            raw = client.chat.completions.with_raw_response.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": f"question {n}"}])
            answered.append(raw.headers["x-request-id"])
        assert gateway.process is not None
        gateway.process.kill()  # SIGKILL, the moment the last answer is in
        gateway.process.wait(10)
    # Durable at the kill: what the thread committed, and what the journal held for the next start.
    db = sqlite3.connect(tmp_path / "firsttoken-spend.db")
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    committed = {row[0] for row in db.execute("SELECT id FROM requests WHERE key = 'capped'")}
    db.close()
    journaled = {json.loads(line)[0] for journal in tmp_path.glob("firsttoken-spend.db.journal-*")
                 for line in journal.read_text().splitlines()}
    counted = committed | journaled
    assert counted <= set(answered) and len(counted) >= len(answered) - 1  # at most one request behind
    with GatewayProcess(settings, tmp_path) as gateway:  # the same files, a new process
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CAPPED_KEY, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", max_tokens=1, messages=[{"role": "user", "content": "one more"}])
        assert raw.headers["x-firsttoken-budget"] == f"day={len(counted) * GPT_4O_MINI:.6f}/{20 * GPT_4O_MINI:g}"
        rows = ledger_rows(gateway.workdir, "key = 'capped'", at_least=len(counted) + 1)
        assert len(rows) == len(counted) + 1
        # spent before the kill, still spent: the next request that may not fit is refused
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="gpt-4o-mini", max_tokens=100_000,
                                           messages=[{"role": "user", "content": "a long one"}])
    db = sqlite3.connect(tmp_path / "firsttoken-spend.db")
    (requests, total) = db.execute("SELECT sum(requests), sum(usd) FROM days WHERE key = 'capped'").fetchone()
    (rows_total,) = db.execute("SELECT sum(usd) FROM requests WHERE key = 'capped'").fetchone()
    db.close()
    # replayed and committed once each: the day's total is its rows', exactly
    assert requests == len(counted) + 1 and total == pytest.approx((len(counted) + 1) * GPT_4O_MINI)
    assert total == pytest.approx(rows_total, rel=1e-12)
    assert not list(tmp_path.glob("firsttoken-spend.db.journal-*"))  # committed, then gone


def test_a_task_sized_down_records_what_the_unsized_model_would_have_cost(upstream: RecordedUpstream,
                                                                          tmp_path: Path) -> None:
    settings = recorded_gateway_settings(upstream.url, sizing={
        "tiers": {"small": ["gpt-4o-mini"], "large": ["claude-sonnet-4-5"]}, "default": "large",
        "kinds": {"classification": "small"}, "neighbours": False})
    with GatewayProcess(settings, tmp_path) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(model="auto", messages=[
            {"role": "user", "content": "Classify the sentiment of this review as positive or negative: great!"}])
        assert raw.headers["x-firsttoken-route"] == "oai/gpt-4o-mini-2024-07-18"
        said = fields(raw.headers["x-firsttoken-cost"])
        # the same tokens at claude-sonnet-4-5's price: 86 × $3 + 1 920 × $0.30 + 300 × $15 per million
        unsized = (86 * 3 + 1920 * 0.3 + 300 * 15) / 1e6
        assert float(said["usd"]) == pytest.approx(GPT_4O_MINI, abs=1e-8) and said["saved-by"] == "sized"
        assert float(said["saved-usd"]) == pytest.approx(unsized - GPT_4O_MINI, abs=1e-8)
        [row] = ledger_rows(gateway.workdir)
        assert row["saved_by"] == "sized" and row["saved_usd"] == pytest.approx(unsized - GPT_4O_MINI)
