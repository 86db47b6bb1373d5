"""What a request cost, through the real SDKs, on each wire format, streamed and whole: the tokens are the
upstream's own usage (recorded shapes: support/recorded_usage.py), priced by the shipped table, and the
same figure is in the answer (x-firsttoken-cost, or a stream's closing comment), in the ledger's row and in
the key's daily totals."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import ADMIN, CLIENT_KEY
from support.gateway_process import GatewayProcess
from support.recorded_usage import run_recorded_upstream
from support.spend_ledger import closing_cost, ledger_rows, recorded_gateway_settings
from support.threaded import InThread
from support.waiting import wait_until

# By hand from prices/tables/api_prices.csv: (uncached input, cached input, cache writes, output) × $/M.
GPT_4O_MINI = (86 * 0.15 + 1920 * 0.075 + 300 * 0.6) / 1e6  # chat completions' recorded usage
CLAUDE_SONNET_4_5 = (50 * 3 + 12000 * 0.3 + 1500 * 3.75 + 420 * 15) / 1e6  # Messages'
CLAUDE_SONNET_4_5_1H = (50 * 3 + 12000 * 0.3 + 1500 * 6 + 420 * 15) / 1e6  # …its cache writes kept an hour
O4_MINI = (952 * 1.1 + 2048 * 0.275 + 900 * 4.4) / 1e6  # Responses'
# (input, cached input, cache writes, output, reasoning) each route's upstream reported
TOKENS = {"oai/gpt-4o-mini-2024-07-18": (2006, 1920, 0, 300, 256),
          "ant/claude-sonnet-4-5-20250929": (13550, 12000, 1500, 420, 0),
          "resp/o4-mini": (3000, 2048, 0, 900, 832)}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with InThread(run_recorded_upstream) as upstream, \
            GatewayProcess(recorded_gateway_settings(upstream.url), tmp_path_factory.mktemp("spend-wire")) as process:
        yield process


def openai_client(gateway: GatewayProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)


def header_fields(value: str) -> dict[str, str]:
    return dict(part.partition("=")[::2] for part in value.split("; "))


def assert_costed(gateway: GatewayProcess, request_id: str, said: str, route: str, usd: float) -> None:
    """The cost the answer said, the ledger's row, and the upstream's own tokens, all agree."""
    fields = header_fields(said)
    assert float(fields["usd"]) == pytest.approx(usd, abs=1e-8)
    [row] = ledger_rows(gateway.workdir, "id = ?", request_id)
    assert row["usd"] == pytest.approx(usd, rel=1e-12) and row["key"] == "app" and row["route"] == route
    assert (row["input_tokens"], row["cached_input_tokens"], row["cache_write_tokens"], row["output_tokens"],
            row["reasoning_tokens"]) == TOKENS[route]
    assert row["estimated"] == 0 and "estimated" not in fields
    assert (int(fields["input"]), int(fields["output"])) == (TOKENS[route][0], TOKENS[route][3])


@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions(gateway: GatewayProcess, stream: bool) -> None:
    client = openai_client(gateway)
    ask = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]}
    if not stream:
        raw = client.chat.completions.with_raw_response.create(**ask)
        assert raw.parse().usage.prompt_tokens_details.cached_tokens == 1920
        said, request_id = raw.headers["x-firsttoken-cost"], raw.headers["x-request-id"]
    else:
        with client.chat.completions.with_streaming_response.create(
                **ask, stream=True, stream_options={"include_usage": True}) as response:
            said, request_id = closing_cost(list(response.iter_lines())), response.headers["x-request-id"]
    assert_costed(gateway, request_id, said, "oai/gpt-4o-mini-2024-07-18", GPT_4O_MINI)


def ask_messages(gateway: GatewayProcess, ask: dict, stream: bool) -> tuple[str, str, Any]:
    """A Messages request through the anthropic SDK: the cost it said, its id, and its usage (whole answers)."""
    client = anthropic.Anthropic(base_url=gateway.url, api_key=CLIENT_KEY, max_retries=0)
    if not stream:
        raw = client.messages.with_raw_response.create(**ask)
        return raw.headers["x-firsttoken-cost"], raw.headers["x-request-id"], raw.parse().usage
    with client.messages.with_streaming_response.create(**ask, stream=True) as response:
        return closing_cost(list(response.iter_lines())), response.headers["x-request-id"], None


@pytest.mark.parametrize("stream", [False, True])
def test_messages(gateway: GatewayProcess, stream: bool) -> None:
    ask = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": [{"role": "user", "content": "Hi"}]}
    said, request_id, usage = ask_messages(gateway, ask, stream)
    assert stream or usage.cache_creation_input_tokens == 1500
    assert_costed(gateway, request_id, said, "ant/claude-sonnet-4-5-20250929", CLAUDE_SONNET_4_5)


@pytest.mark.parametrize("stream", [False, True])
def test_messages_with_writes_kept_an_hour(gateway: GatewayProcess, stream: bool) -> None:
    """Cache writes a request asked to be kept an hour (Claude Code's long-lived prompt prefix) cost 2× the
    input's price, not the 5-minute writes' 1.25×: told apart by the usage's `cache_creation` breakdown."""
    ask = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": [{"role": "user", "content": "Hi"}],
           "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}
    said, request_id, usage = ask_messages(gateway, ask, stream)
    assert stream or usage.cache_creation.ephemeral_1h_input_tokens == 1500
    assert header_fields(said)["cache-write-1h"] == "1500"
    assert_costed(gateway, request_id, said, "ant/claude-sonnet-4-5-20250929", CLAUDE_SONNET_4_5_1H)


@pytest.mark.parametrize("stream", [False, True])
def test_responses(gateway: GatewayProcess, stream: bool) -> None:
    client = openai_client(gateway)
    ask = {"model": "o4-mini", "input": "Hi"}
    if not stream:
        raw = client.responses.with_raw_response.create(**ask)
        assert raw.parse().usage.output_tokens_details.reasoning_tokens == 832
        said, request_id = raw.headers["x-firsttoken-cost"], raw.headers["x-request-id"]
    else:
        with client.responses.with_streaming_response.create(**ask, stream=True) as response:
            said, request_id = closing_cost(list(response.iter_lines())), response.headers["x-request-id"]
    assert_costed(gateway, request_id, said, "resp/o4-mini", O4_MINI)


def test_a_chat_client_of_an_anthropic_upstream_pays_its_cache_writes(gateway: GatewayProcess) -> None:
    """Translated into chat's shape, Anthropic's three kinds of input are still priced apart."""
    raw = openai_client(gateway).chat.completions.with_raw_response.create(
        model="claude-sonnet-4-5", max_tokens=1024, messages=[{"role": "user", "content": "Hi"}])
    assert raw.parse().usage.prompt_tokens == 13550
    assert_costed(gateway, raw.headers["x-request-id"], raw.headers["x-firsttoken-cost"],
                  "ant/claude-sonnet-4-5-20250929", CLAUDE_SONNET_4_5)


def test_the_days_totals_are_the_rows_sum_and_v1_spend_says_them(gateway: GatewayProcess) -> None:
    raw = openai_client(gateway).chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Hi"}])
    ledger_rows(gateway.workdir, "id = ?", raw.headers["x-request-id"])  # committed, with its day's totals
    db = sqlite3.connect(gateway.workdir / "firsttoken-spend.db")
    by_rows = dict(db.execute("SELECT route, sum(usd) FROM requests GROUP BY route").fetchall())
    by_days = dict(db.execute("SELECT route, sum(usd) FROM days GROUP BY route").fetchall())
    db.close()
    assert by_days.keys() == by_rows.keys() and all(by_days[r] == pytest.approx(by_rows[r]) for r in by_rows)
    report = openai_client(gateway).get("/spend", cast_to=object, options={"headers": ADMIN,
                                                                           "params": {"by": "model"}})
    assert {row["model"]: row["usd"] for row in report["rows"]} == pytest.approx(by_rows)
    assert report["total"]["tokens"]["input"] > 0 and report["budgets"] == []


def test_the_journey_and_the_metrics_say_the_cost(gateway: GatewayProcess) -> None:
    raw = openai_client(gateway).chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Hi"}])
    journey = httpx.get(f"{gateway.url}/v1/journeys/{raw.headers['x-request-id']}", headers=ADMIN).json()
    assert journey["cost"]["usd"] == pytest.approx(GPT_4O_MINI) and journey["cost"]["saved"] is None
    assert journey["cost"]["tokens"] == {"input": 2006, "cached_input": 1920, "cache_write": 0, "cache_write_1h": 0,
                                         "output": 300, "reasoning": 256}
    ledger_rows(gateway.workdir, "id = ?", raw.headers["x-request-id"])
    db = sqlite3.connect(gateway.workdir / "firsttoken-spend.db")
    counted = dict(db.execute("SELECT route, sum(usd) FROM requests WHERE key = 'app' GROUP BY route").fetchall())
    db.close()

    def metrics() -> dict | None:
        """The metrics, once the sink's batch with this request is in them (its cost is the ledger's)."""
        families = {f.name: f for f in text_string_to_metric_families(
            httpx.get(gateway.url + "/metrics", headers=ADMIN).text)}
        usd = {s.labels["firsttoken_route"]: s.value for s in families["firsttoken_cost_usd"].samples
               if s.name.endswith("_total") and s.labels["firsttoken_key"] == "app"}
        return families if usd == pytest.approx(counted) else None

    families = wait_until(metrics, f"the metrics to say the ledger's costs, {counted}")
    reasoning = [s.value for s in families["firsttoken_tokens"].samples
                 if s.labels.get("gen_ai_token_type") == "reasoning" and s.name.endswith("_total")]
    assert sum(reasoning) > 0
