"""Redis stopped and started again under load, with a real gateway in front of it keeping its cache and its
keys' limits there: no client sees a 500; meanwhile the cache misses and the limits let requests through
(`limits.redis_down: open`, the default) or refuse limited keys with a 503 that says why (`closed`); once
Redis is back, the gateway uses it again without a restart: the limit holds and answers are cached again."""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Iterator
from itertools import count
from pathlib import Path

import httpx
import pytest

from conftest import CLIENT_KEY, OTHER_CLIENT_KEY
from firsttoken.redis_guard import DEFAULT_POLICY
from support.gateway_process import GatewayProcess
from support.openai_upstream import UPSTREAM_KEY
from support.redis_server import RedisServer
from support.waiting import wait_until, within

TIGHT = {"authorization": f"Bearer {OTHER_CLIENT_KEY}"}  # 3 requests a minute
FREE = {"authorization": f"Bearer {CLIENT_KEY}"}  # no limits
QUESTIONS = count()
ACROSS = 10  # requests the load answers across each change: it ran through the outage, not beside it


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path) as server:
        yield server


def settings(upstream_url: str, redis_url: str, down: str) -> dict:
    # Stopped, Redis refuses connections at once: no command needs to time out, so a command that a busy
    # machine kept past the default 0.1 s must not count as an outage (the URL's socket_timeout wins).
    redis_url += f"?socket_timeout={within(DEFAULT_POLICY.timeout_s):g}"
    return {"upstreams": {"fake": {"url": upstream_url, "key": UPSTREAM_KEY}}, "models": {"chat": ["fake/echo"]},
            "keys": [{"name": "free", "key": CLIENT_KEY}, {"name": "tight", "key": OTHER_CLIENT_KEY, "rpm": 3}],
            "limits": {"redis": redis_url, "redis_down": down},
            "cache": {"backend": "redis", "url": redis_url, "semantic": False}}


def ask(url: str, headers: dict[str, str], question: str | None = None) -> httpx.Response:
    content = question or f"question {next(QUESTIONS)}"
    return httpx.post(f"{url}/v1/chat/completions", headers=headers, timeout=10,
                      json={"model": "chat", "messages": [{"role": "user", "content": content}]})


class Load:
    """Unlimited requests as fast as they are answered, each new, every status counted."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.statuses: Counter[int] = Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(15)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.statuses[ask(self.url, FREE).status_code] += 1

    def answered(self) -> int:
        return sum(self.statuses.values())

    def carry_on(self, what: str) -> None:
        """Wait until ACROSS more requests were answered (whatever their status)."""
        target = self.answered() + ACROSS
        wait_until(lambda: self.answered() >= target, f"{ACROSS} more requests of the load {what}")


def cache_says(url: str, question: str) -> str:
    return ask(url, FREE, question).headers["x-firsttoken-cache"]


@pytest.mark.parametrize("down", ["open", "closed"])
def test_redis_stopped_and_started_under_load(upstream, redis: RedisServer, tmp_path: Path, down: str) -> None:
    with GatewayProcess(settings(upstream.url, redis.url, down), tmp_path) as gateway, Load(gateway.url) as load:
        kept = "a question asked before the outage"
        assert cache_says(gateway.url, kept) == "miss"
        # written behind the answer: wait for it to land in Redis
        wait_until(lambda: cache_says(gateway.url, kept) == "hit", "the answer to be cached in Redis")
        tight = [ask(gateway.url, TIGHT).status_code for _ in range(4)]
        assert tight == [200, 200, 200, 429], tight  # the limit is counted in Redis
        load.carry_on("before the outage")

        redis.stop()
        stopped = time.monotonic()
        load.carry_on("while Redis is away")
        during = [ask(gateway.url, TIGHT) for _ in range(5)]
        if down == "open":
            assert [r.status_code for r in during] == [200] * 5  # let through, uncounted
        else:
            assert {r.status_code for r in during} == {503}
            error = during[-1].json()["error"]
            assert error["code"] == "limits_unavailable" and "limits.redis_down" in error["message"]
            assert during[-1].headers["retry-after"] == "2"
        assert cache_says(gateway.url, kept) == "miss"  # nothing to read it from

        redis.start()  # empty: what it held is gone
        # back after the circuit's next probe (a cool-down of 1 s, doubled for each probe that failed)
        wait_until(lambda: ask(gateway.url, TIGHT).status_code == 429, "the limit to hold again")
        again = f"a question asked after the outage ({down})"
        ask(gateway.url, FREE, again)
        wait_until(lambda: cache_says(gateway.url, again) == "hit", "answers to be cached in Redis again")
        away = time.monotonic() - stopped
        load.carry_on("after Redis came back")
    assert load.statuses[200] >= 3 * ACROSS and set(load.statuses) == {200}, load.statuses  # nobody noticed
    log = gateway.log()
    assert "Traceback" not in log
    # The cache's line and the limits': one each per interval however many requests met the outage (one
    # more per interval only if this machine took that long to bring Redis back).
    assert 2 <= log.count("unavailable") <= 2 * math.ceil(1 + away / DEFAULT_POLICY.warn_every_s), (away, log)
    assert log.count("is back after") == 2, log
