"""Redis stopped and started again under load, with a real gateway in front of it keeping its cache and its
keys' limits there: no client sees a 500; meanwhile the cache misses and the limits let requests through
(`limits.redis_down: open`, the default) or refuse limited keys with a 503 that says why (`closed`); once
Redis is back, the gateway uses it again without a restart: the limit holds and answers are cached again."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from itertools import count
from pathlib import Path

import httpx
import pytest

from conftest import CLIENT_KEY, OTHER_CLIENT_KEY
from support.gateway_process import GatewayProcess
from support.openai_upstream import UPSTREAM_KEY
from support.redis_server import RedisServer

TIGHT = {"authorization": f"Bearer {OTHER_CLIENT_KEY}"}  # 3 requests a minute
FREE = {"authorization": f"Bearer {CLIENT_KEY}"}  # no limits
QUESTIONS = count()


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path) as server:
        yield server


def settings(upstream_url: str, redis_url: str, down: str) -> dict:
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


def until(condition, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("down", ["open", "closed"])
def test_redis_stopped_and_started_under_load(upstream, redis: RedisServer, tmp_path: Path, down: str) -> None:
    with GatewayProcess(settings(upstream.url, redis.url, down), tmp_path) as gateway, Load(gateway.url) as load:
        kept = "a question asked before the outage"
        assert ask(gateway.url, FREE, kept).headers["x-firsttoken-cache"] == "miss"
        assert until(lambda: ask(gateway.url, FREE, kept).headers["x-firsttoken-cache"] == "hit", 5)
        tight = [ask(gateway.url, TIGHT).status_code for _ in range(4)]
        assert tight == [200, 200, 200, 429], tight  # the limit is counted in Redis

        redis.stop()
        time.sleep(0.5)
        during = [ask(gateway.url, TIGHT) for _ in range(5)]
        if down == "open":
            assert [r.status_code for r in during] == [200] * 5  # let through, uncounted
        else:
            assert {r.status_code for r in during} == {503}
            error = during[-1].json()["error"]
            assert error["code"] == "limits_unavailable" and "limits.redis_down" in error["message"]
            assert during[-1].headers["retry-after"] == "2"
        assert ask(gateway.url, FREE, kept).headers["x-firsttoken-cache"] == "miss"  # nothing to read it from

        redis.start()  # empty: what it held is gone
        assert until(lambda: ask(gateway.url, TIGHT).status_code == 429), "the limit never held again"
        again = f"a question asked after the outage ({down})"
        ask(gateway.url, FREE, again)
        assert until(lambda: ask(gateway.url, FREE, again).headers["x-firsttoken-cache"] == "hit", 5)
    assert load.statuses[200] > 20 and set(load.statuses) == {200}, load.statuses  # no unlimited client noticed
    log = gateway.log()
    assert "Traceback" not in log
    assert 2 <= log.count("unavailable") <= 4, log  # the cache's line and the limits': per interval, not request
    assert log.count("is back after") == 2, log
