"""Budgets through the real SDKs: a key is refused at the request that might take it past its budget, in
its route's own error format (429, budget_exceeded, when it resets), warned as it nears it, and other keys
are untouched; a budget resets at the UTC day's and month's turn; `firsttoken spend` says it all at 80
columns."""

from __future__ import annotations

import calendar
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from conftest import ADMIN, CLIENT_KEY
from firsttoken.config import ClientKey
from firsttoken.errors import GatewayError
from firsttoken.spend.budgets import Budgets
from firsttoken.spend.ledger import SpendLedger, utc_day
from support.gateway_process import GatewayProcess
from support.recorded_usage import run_recorded_upstream
from support.spend_ledger import ledger_rows, recorded_gateway_settings
from support.threaded import InThread

CAPPED_KEY = "capped-client-key-0001"
CLAUDE = (50 * 3 + 12000 * 0.3 + 1500 * 3.75 + 420 * 15) / 1e6  # $0.015675 a request (test_costs_by_wire)
ASK = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": [{"role": "user", "content": "Hi"}]}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with InThread(run_recorded_upstream) as upstream:
        settings = recorded_gateway_settings(upstream.url, spend={"warn_at": 0.5})
        settings["keys"].append({"name": "capped", "key": CAPPED_KEY, "budget": {"usd_per_day": 0.06}})
        with GatewayProcess(settings, tmp_path_factory.mktemp("spend-budgets")) as process:
            yield process


def test_the_request_that_may_not_fit_is_refused_in_each_format(gateway: GatewayProcess) -> None:
    client = anthropic.Anthropic(base_url=gateway.url, api_key=CAPPED_KEY, max_retries=0)
    standing = []
    for _ in range(3):
        raw = client.messages.with_raw_response.create(**ASK)
        standing.append((raw.headers["x-firsttoken-budget"], raw.headers.get("x-firsttoken-budget-warning")))
    assert standing[0] == ("day=0.000000/0.06", None)
    assert standing[2][0] == f"day={2 * CLAUDE:.6f}/0.06"
    assert (standing[2][1] or "").startswith("52% of the day's budget of $0.06 is spent; it resets at ")
    # $0.047025 spent; the fourth may cost its prompt and 1 024 tokens at $15/M: $0.0154, past the $0.06
    before = time.time()
    with pytest.raises(anthropic.RateLimitError) as refused:
        client.messages.create(**ASK)
    after = time.time()
    error = refused.value
    assert error.body["error"]["type"] == "rate_limit_error"
    assert "may cost up to $0.0154 (its prompt and max_tokens), and $0.0130 is left" in error.body["error"]["message"]
    midnight = calendar.timegm(time.gmtime(before)[:3] + (0, 0, 0)) + 86400
    # the whole seconds to midnight from the moment it was refused, somewhere between `before` and `after`
    assert int(midnight - after) + 1 <= int(error.response.headers["retry-after"]) <= int(midnight - before) + 1
    assert error.response.headers["x-firsttoken-budget-resets"] == time.strftime("%Y-%m-%dT00:00:00Z",
                                                                                time.gmtime(midnight))
    assert error.response.headers["x-should-retry"] == "false"  # the SDKs would otherwise try again
    chat = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CAPPED_KEY, max_retries=0)
    with pytest.raises(openai.RateLimitError) as refused_chat:
        chat.chat.completions.create(**ASK)
    assert refused_chat.value.code == "budget_exceeded" and refused_chat.value.type == "insufficient_quota"
    # refused requests cost nothing and reach no upstream; another key is not held to this one's budget
    rows = ledger_rows(gateway.workdir, "key = 'capped'", at_least=3)
    assert len(rows) == 3 and sum(r["usd"] for r in rows) == pytest.approx(3 * CLAUDE)
    other = anthropic.Anthropic(base_url=gateway.url, api_key=CLIENT_KEY, max_retries=0)
    assert "x-firsttoken-budget" not in other.messages.with_raw_response.create(**ASK).headers


def test_spend_reports_keys_models_and_budgets_at_80_columns(gateway: GatewayProcess) -> None:
    anthropic.Anthropic(base_url=gateway.url, api_key=CLIENT_KEY, max_retries=0).messages.create(**ASK)
    ledger_rows(gateway.workdir, "key = 'app'", at_least=1)
    run = subprocess.run([sys.executable, "-m", "firsttoken", "spend", "--config", str(gateway.config_path),
                          "--since", "7d"], capture_output=True, text=True, cwd=gateway.workdir,
                         env={**os.environ, "COLUMNS": "80"}, timeout=60)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, run.stdout
    capped = next(line for line in lines if line.startswith("capped"))
    assert "ant/claude-sonnet" in capped and f"${3 * CLAUDE:.4f}" in capped
    assert f"budget capped: $0.06 a day; today ${3 * CLAUDE:.4f}" in run.stdout.replace("\n", " ")
    assert "within budget" in run.stdout and "PAST" not in run.stdout
    as_json = subprocess.run([sys.executable, "-m", "firsttoken", "spend", "--config", str(gateway.config_path),
                              "--by", "key", "--json"], capture_output=True, text=True, cwd=gateway.workdir,
                             timeout=60)
    report = json.loads(as_json.stdout)
    assert {row["key"] for row in report["rows"]} >= {"capped", "app"}
    assert report["budgets"][0]["key"] == "capped" and report["budgets"][0]["today"] == pytest.approx(3 * CLAUDE)


def test_a_client_key_sees_only_its_own_spend(gateway: GatewayProcess) -> None:
    mine = httpx.get(gateway.url + "/v1/spend", headers={"authorization": f"Bearer {CAPPED_KEY}"}).json()
    assert {row["key"] for row in mine["rows"]} == {"capped"}
    everyone = httpx.get(gateway.url + "/v1/spend", headers=ADMIN, params={"key": "app"}).json()
    assert {row["key"] for row in everyone["rows"]} == {"app"}
    bad = httpx.get(gateway.url + "/v1/spend", headers=ADMIN, params={"by": "colour"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "by"


async def test_budgets_reset_at_the_turn_of_the_utc_day_and_month_and_survive_a_restart(tmp_path: Path) -> None:
    year, month = time.gmtime()[:2]
    days = calendar.monthrange(year, month)[1]
    noon = [calendar.timegm((year, month, day, 12, 0, 0)) for day in range(1, days + 1)]
    last_second = calendar.timegm((year, month, days, 23, 59, 59))
    next_month = last_second + 1
    ledger = SpendLedger(tmp_path / "spend.db")
    ledger.start()
    for n, (at, usd) in enumerate(((noon[0], 2.6), (noon[1], 3.0), (last_second - 60, 3.0))):
        ledger.record((f"req_{n}", at, utc_day(at), "team", "up/m", "chat", 1, 0, 0, 1, 0, 0, usd, None, 0, 0.0, None))
    ledger.close()  # written; a new ledger on the file starts from what it holds
    ledger = SpendLedger(tmp_path / "spend.db")
    keys = [ClientKey(name="team", key="team-key-12345678", budget={"usd_per_day": 3, "usd_per_month": 5.5})]
    budgets = Budgets(keys, ledger)

    async def refusal(at: float) -> str | None:
        try:
            await budgets.admit("team", 0.0001, at, "req")
            await budgets.settle("team", "req", 0.0001, 0.0, utc_day(at))
        except GatewayError as error:
            assert error.status == 429 and error.code == "budget_exceeded"
            return error.message
        return None

    assert await refusal(noon[0]) is None  # $2.60 of the day's $3
    assert "for the day" in (await refusal(noon[1]) or "")  # $3 spent that day
    assert "for the month" in (await refusal(noon[2]) or "")  # a new day, but $5.60 of the month's $5.50
    assert "for the day" in (await refusal(last_second) or "")  # its day: checked first
    assert await refusal(next_month) is None  # the 1st, 00:00:00 UTC: both budgets anew
    standing = await budgets.admit("team", 0.0001, next_month, "req")
    assert standing == [(b"x-firsttoken-budget", b"day=0.000000/3; month=0.000000/5.5")]
