"""The journey log survives restarts and `firsttoken journeys` summarises it; /metrics speaks the GenAI
semantic conventions; the log stays within its bounds."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import UPSTREAM_KEY
from firsttoken.journey import log as journey_log
from firsttoken.journey.attribution import phases
from firsttoken.journey.log import JourneyLog, row
from firsttoken.journey.metrics import Metrics
from firsttoken.journey.sink import JourneySink
from firsttoken.journey.summary import parse_since, percentile, summarise
from firsttoken.journey.timeline import Timeline
from support.gateway_process import GatewayProcess
from support.waiting import wait_until, wait_until_async

USER = [{"role": "user", "content": "hello there"}]


def settings(upstream_url: str) -> dict:
    # every request must cross to the upstream: the edge cache (on by default) has its own tests
    return {"cache": False, "upstreams": {"fake": {"url": upstream_url, "key": UPSTREAM_KEY}}}


def ask(gateway: GatewayProcess, n: int) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="none", max_retries=0)
    for i in range(n):
        if i % 2:
            client.chat.completions.create(model="fake/echo", messages=USER)
        else:
            for _ in client.chat.completions.create(model="fake/echo", messages=USER, stream=True):
                pass


def test_the_log_survives_a_restart_and_is_summarised(tmp_path, upstream) -> None:
    for _ in range(2):
        with GatewayProcess(settings(upstream.url), tmp_path) as gateway:
            ask(gateway, 3)  # its shutdown writes the last journeys to the log
    path = tmp_path / "firsttoken-journeys.db"
    rows = journey_log.read(path)
    assert len(rows) == 6 and {r["upstream"] for r in rows} == {"fake"} and {r["status"] for r in rows} == {200}
    result = subprocess.run([sys.executable, "-m", "firsttoken", "journeys", "--log", str(path), "--json"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    fake = json.loads(result.stdout)["upstreams"]["fake"]
    assert fake["requests"] == 6 and fake["errors"] == 0 and fake["models"] == ["fake/echo"]
    assert fake["ttft"]["p50"] > 0 and fake["e2e"]["p95"] >= fake["e2e"]["p50"]
    table = subprocess.run([sys.executable, "-m", "firsttoken", "journeys", "--log", str(path), "--since", "1h"],
                           capture_output=True, text=True, timeout=30, env={"COLUMNS": "160", "PATH": "/usr/bin"})
    assert "Where the time went" in table.stdout and "fake" in table.stdout
    old = subprocess.run([sys.executable, "-m", "firsttoken", "journeys", "--log", str(path), "--since", "bad"],
                         capture_output=True, text=True, timeout=30)
    assert old.returncode == 2 and "30m, 6h or 7d" in old.stderr


def test_metrics_use_the_genai_names(tmp_path, upstream) -> None:
    labels = 'firsttoken_upstream="fake",gen_ai_operation_name="chat",gen_ai_request_model="echo"'
    with GatewayProcess(settings(upstream.url), tmp_path) as gateway:
        ask(gateway, 4)

        def all_four() -> str:
            """/metrics once it counts the four (it takes the batch first, but a request's journey joins the
            batch as its handler ends, a moment after its client has the answer)."""
            text = httpx.get(gateway.url + "/metrics", timeout=5).text
            return text if f'gen_ai_client_operation_duration_seconds_count{{error_type="",{labels}}} 4.0' in text \
                else ""

        text = wait_until(all_four, "the four requests in /metrics")
    for name in ("gen_ai_client_operation_duration_seconds", "gen_ai_server_time_to_first_token_seconds",
                 "gen_ai_client_token_usage"):
        assert f"# TYPE {name} histogram" in text
    assert f'gen_ai_server_time_to_first_token_seconds_count{{{labels}}} 2.0' in text  # the two streams
    assert f'gen_ai_client_operation_duration_seconds_count{{error_type="",{labels}}} 4.0' in text
    assert 'gen_ai_client_token_usage_count{firsttoken_upstream="fake",gen_ai_operation_name="chat",' \
           'gen_ai_request_model="echo",gen_ai_token_type="output"} 4.0' in text
    assert 'firsttoken_journey_phase_seconds_count{firsttoken_upstream="fake",phase="rtt"} 4.0' in text
    assert 'firsttoken_cache_requests_total{result="bypass"} 4.0' in text


def finished(request_id: str, tenant: str = "t") -> Timeline:
    t = Timeline(request_id)
    t.tenant, t.status, t.upstream, t.route, t.sent, t.first_byte, t.last_byte = (
        tenant, 200, "up", "up/m", t.received, t.received + 0.01, t.received + 0.02)
    return t


def logged(request_id: str, at: float) -> tuple:
    timeline = finished(request_id)
    return row(timeline, phases(timeline)[0], at)


def test_the_log_is_bounded_by_rows_and_age(tmp_path) -> None:
    log = JourneyLog(tmp_path / "j.db", max_rows=1000, max_age_s=3600)
    now = time.time()
    log.write([logged(f"old{i}", now - 7200) for i in range(10)])
    log.write([logged(f"new{i}", now - 1200 + i) for i in range(1200)])
    log.prune(now)
    rows = journey_log.read(tmp_path / "j.db")
    assert len(rows) == 1000 and not any(r["id"].startswith("old") for r in rows)
    assert rows[0]["id"] == "new200" and rows[-1]["id"] == "new1199"  # the last 1000 written are kept
    log.close()


def test_the_sink_drops_the_oldest_when_it_falls_behind(tmp_path) -> None:
    sink = JourneySink(JourneyLog(tmp_path / "j.db", 1000, 3600), Metrics(), capacity=3)
    for i in range(5):  # the writer is not started: nothing drains
        sink.put(finished(f"r{i}"))
    assert sink.dropped == 2
    sink.close()  # writes what is left
    assert [r["id"] for r in journey_log.read(tmp_path / "j.db")] == ["r2", "r3", "r4"]


def counted(metrics: Metrics) -> float:
    """Requests in the operation-duration histogram."""
    return sum(sample.value for family in text_string_to_metric_families(metrics.exposition().decode())
               for sample in family.samples if sample.name == "gen_ai_client_operation_duration_seconds_count")


async def test_a_started_sink_takes_journeys_in_batches_and_loses_none(tmp_path) -> None:
    metrics = Metrics()
    sink = JourneySink(JourneyLog(tmp_path / "j.db", 1000, 3600), metrics)
    sink.start()
    for i in range(3):
        sink.put(finished(f"b{i}"))
    assert counted(metrics) == 0  # waiting for its batch
    await wait_until_async(lambda: counted(metrics) == 3, "the batch taken on the loop")
    sink.put(finished("last"))  # finished just before shutdown: close takes it
    await asyncio.to_thread(sink.close)
    assert [r["id"] for r in journey_log.read(tmp_path / "j.db")] == ["b0", "b1", "b2", "last"]


def test_summary_helpers() -> None:
    assert percentile([5, 1, 3, 2, 4], 50) == 3 and percentile([5, 1, 3, 2, 4], 95) == 5 and percentile([], 50) is None
    assert parse_since("30m", now=10_000) == 10_000 - 1800 and parse_since("2d", now=200_000) == 200_000 - 172_800
    with pytest.raises(ValueError):
        parse_since("soon")
    rows = [logged("a", 0.0), logged("b", 1.0)]
    summary = summarise([dict(zip(journey_log.COLUMNS, r, strict=True)) for r in rows])
    assert summary["up"]["requests"] == 2 and summary["up"]["ttfb"]["p50"] == pytest.approx(10, abs=0.01)


def test_hedges_and_retries_are_logged_and_counted(tmp_path) -> None:
    won, lost, retried = finished("won"), finished("lost"), finished("retried")
    won.hedge, lost.hedge, retried.attempts = b"; hedge-of=up/slow", b"; hedged-by=up/other", 2
    log = JourneyLog(tmp_path / "j.db", 1000, 3600)
    log.write([row(t, phases(t)[0], time.time()) for t in (won, lost, retried, finished("plain"))])
    rows = journey_log.read(tmp_path / "j.db")
    assert [r["hedge"] for r in rows] == ["hedge-of=up/slow", "hedged-by=up/other", None, None]
    summary = summarise(rows)["up"]
    assert summary["requests"] == 4 and summary["hedge_wins"] == 1 and summary["retried"] == 1


def test_a_log_from_before_the_hedge_column_gains_it(tmp_path) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    before = re.sub(r",(\s*--[^\n]*)\n\s*hedge TEXT[^\n]*", r"\1", journey_log.SCHEMA)  # the first schema
    assert "hedge" not in before
    old.executescript(before)
    old.execute("INSERT INTO journeys (id, at, upstream, status) VALUES ('before', ?, 'up', 200)", (time.time(),))
    old.commit()
    old.close()
    log = JourneyLog(path, 1000, 3600)
    t = finished("after")
    t.hedge = b"; hedge-of=up/slow"
    log.write([row(t, phases(t)[0], time.time())])
    assert [(r["id"], r["hedge"]) for r in journey_log.read(path)] == [("before", None), ("after", "hedge-of=up/slow")]
