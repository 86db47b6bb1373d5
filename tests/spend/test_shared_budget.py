"""Two replicas on one Redis hold a key to one budget, exactly: requests sent to either, one after another
or all at once, are let in as long as the most each may cost fits beside what both have spent and hold,
and not one more; what they spend is the budget's, not twice it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack

import anthropic
import pytest

from support.gateway_process import GatewayProcess
from support.recorded_usage import RecordedUpstream, run_recorded_upstream
from support.redis_server import RedisServer
from support.spend_ledger import ledger_rows, recorded_gateway_settings
from support.threaded import InThread
from support.waiting import wait_until

CLAUDE = (50 * 3 + 12000 * 0.3 + 1500 * 3.75 + 420 * 15) / 1e6  # $0.015675 a request (test_costs_by_wire)
MOST = (1 * 3 + 1024 * 15) / 1e6  # what one is held for: its prompt (a token, by estimate) and max_tokens
ASK = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": [{"role": "user", "content": "Hi"}]}


def replicas(upstream: RecordedUpstream, redis: RedisServer, tmp_path_factory: pytest.TempPathFactory,
             name: str, key: str, budget: float) -> tuple[ExitStack, list[GatewayProcess]]:
    """Two gateways on one Redis, each with its own files; a key with a daily budget."""
    stack = ExitStack()
    settings = recorded_gateway_settings(upstream.url, spend={"redis": redis.url})
    settings["keys"].append({"name": name, "key": key, "budget": {"usd_per_day": budget}})
    return stack, [stack.enter_context(GatewayProcess(settings, tmp_path_factory.mktemp(f"{name}-{n}")))
                   for n in (1, 2)]


@pytest.fixture(scope="module")
def upstream() -> Iterator[RecordedUpstream]:
    with InThread(run_recorded_upstream) as server:
        yield server


def spent(gateways: list[GatewayProcess], name: str, answered: int) -> list[dict]:
    """Both replicas' rows of `name`, once the `answered` requests are all committed."""
    def rows() -> list[dict] | None:
        found = [row for gateway in gateways for row in ledger_rows(gateway.workdir, "key = ?", name, at_least=0)]
        return found if len(found) >= answered else None

    return wait_until(rows, f"{answered} committed rows of {name}")


def test_one_after_another_on_either_replica(upstream: RecordedUpstream, redis_server: RedisServer,
                                             tmp_path_factory: pytest.TempPathFactory) -> None:
    key = "shared-budget-key-0001"
    stack, gateways = replicas(upstream, redis_server, tmp_path_factory, "one-by-one", key, 0.06)
    with stack:
        clients = [anthropic.Anthropic(base_url=g.url, api_key=key, max_retries=0) for g in gateways]
        for n in range(3):  # $0.047 spent after three, across both: the fourth may cost $0.0154 more
            clients[n % 2].messages.create(**ASK)
        for client in clients:
            with pytest.raises(anthropic.RateLimitError, match="budget for the day"):
                client.messages.create(**ASK)
        rows = spent(gateways, "one-by-one", 3)
        assert len(rows) == 3 and sum(r["usd"] for r in rows) == pytest.approx(3 * CLAUDE)


def test_all_at_once_on_both_replicas(upstream: RecordedUpstream, redis_server: RedisServer,
                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    key = "shared-budget-key-0002"
    budget = 0.05  # room for three holds of $0.0154, not four
    stack, gateways = replicas(upstream, redis_server, tmp_path_factory, "at-once", key, budget)
    # every request let in stays in flight until all eight have had their answer
    with upstream.gate.shut(), stack:
        outcomes: list[str] = []

        def ask(gateway: GatewayProcess) -> None:
            try:
                anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0).messages.create(**ASK)
                outcomes.append("answered")
            except anthropic.RateLimitError:
                outcomes.append("refused")

        threads = [threading.Thread(target=ask, args=(gateways[n % 2],)) for n in range(8)]
        for thread in threads:
            thread.start()
        # Each of the eight is let in (and held upstream) or refused, all while those let in are in flight.
        wait_until(lambda: upstream.gate.waiting + len(outcomes) == 8, "each request let in or refused")
        upstream.gate.open()
        for thread in threads:
            thread.join(30)
        assert sorted(outcomes) == ["answered"] * 3 + ["refused"] * 5
        assert 3 * MOST <= budget < 4 * MOST
        rows = spent(gateways, "at-once", 3)
        assert len(rows) == 3 and sum(r["usd"] for r in rows) <= budget
