"""Redis as a dependency that can freeze or stop, for both of its users (the edge cache's RedisStore, the
client keys' ClientLimits), against a real redis-server of each test's own (frozen with SIGSTOP, stopped,
thawed, started again on its port; the fixture thaws and stops it whatever happens):

- frozen: one command waits out the short timeout, then the circuit is open and every lookup and admit
  returns at once, without touching Redis; when the cool-down ends exactly one request probes;
- stopped: many requests, one warning line per user, without the URL's password;
- thawed or restarted: the next probe after the cool-down finds Redis, and it is used again (a limit is
  enforced, an answer is written and read, the prompt follower goes on).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Iterator
from typing import TypeVar

import numpy as np
import pytest
import redis.asyncio as aioredis

from firsttoken.cache.entry import Entry, PromptRecord
from firsttoken.cache.redis_store import FOLLOW_PAUSE_S, RedisStore
from firsttoken.config import ClientKey
from firsttoken.redis_guard import GuardPolicy, redacted
from firsttoken.routing.client_limits import ClientLimits
from support.limits import admitted
from support.redis_server import RedisServer
from support.waiting import PATIENCE_S, not_before, wait_until_async, within

T = TypeVar("T")

ASK = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
# Each command's timeout: five times the default 0.1 s, so that a live Redis on a busy machine is never
# taken for a frozen one, and still a tenth of redis-py's 5 s (a frozen one costs `within` it, < 5 s).
TIMEOUT_S = 0.5


@pytest.fixture
def redis_alone(tmp_path) -> Iterator[RedisServer]:
    """A redis-server of this test's own: freezing or stopping it cannot hurt the session's."""
    with RedisServer(tmp_path) as server:  # its exit thaws it first, then stops it
        yield server


def key(rpm: int) -> ClientKey:
    return ClientKey(name="app", key="client-key-appappappapp", rpm=rpm)


def entry() -> Entry:
    now = time.time()
    return Entry("json", b'{"choices":[]}', "app", "up/m", now, now + 60)


def prompt(ref: str) -> PromptRecord:
    return PromptRecord(ref, "scope", f"question {ref}", np.full(4, 0.5, dtype=np.float32).tobytes(), time.time() + 60)


async def timed(call: Awaitable[T]) -> tuple[T, float]:
    start = time.monotonic()
    result = await call
    return result, time.monotonic() - start


async def probe_due(*guarded: RedisStore | ClientLimits) -> None:
    """Wait until each one's cool-down is over: its next command probes Redis."""
    guards = [g.guard for g in guarded]
    await wait_until_async(lambda: all(g is not None and g.retry_in_s() == 0 for g in guards),
                           "the cool-down to end")


def warnings_from(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno >= logging.WARNING]


async def test_a_frozen_redis_costs_one_timeout_then_nothing(redis_alone) -> None:
    policy = GuardPolicy(TIMEOUT_S, cool_down_s=30)  # no probe during the test: every command after the first skips
    store = RedisStore(redis_alone.url, 10_000, "frozen:", policy=policy)
    limits = ClientLimits([key(rpm=1000)], redis_alone.url, "frozen:", policy=policy)
    store.put("k", entry())
    await store.settle()
    assert await store.get("k", time.time()) is not None and await admitted(limits, ASK)  # connections pooled
    redis_alone.freeze()
    try:
        (found, first_get), (charge, first_admit) = await timed(store.get("k", time.time())), await timed(
            limits.admit("app", ASK))
        assert found is None and charge is not None  # a miss; a request let through
        # the policy's timeout, not the 5 s of redis-py's default
        assert within(policy.timeout_s) < 5
        assert first_get < within(policy.timeout_s) and first_admit < within(policy.timeout_s)
        assert store.guard.is_open and limits.guard is not None and limits.guard.is_open
        assert store.guard.failed == 1 and limits.guard.failed == 1

        gets = [await timed(store.get("k", time.time())) for _ in range(50)]
        admits = [await timed(limits.admit("app", ASK)) for _ in range(50)]
        store.put("k2", entry())
        _, writes = await timed(store.settle())
        assert all(found is None for found, _ in gets) and all(charge is not None for charge, _ in admits)
        assert store.guard.skipped == 51 and limits.guard.skipped == 50  # none of them touched Redis
        assert store.guard.failed == 1 and limits.guard.failed == 1
        # …so none waited: all 101 together took less than a few timeouts would (one each: 50 s)
        assert sum(t for _, t in gets + admits) + writes < within(policy.timeout_s)
    finally:
        redis_alone.thaw()
        await store.close()
        await limits.close()


async def test_when_the_cool_down_ends_exactly_one_request_probes(redis_alone) -> None:
    policy = GuardPolicy(TIMEOUT_S, cool_down_s=0.2)
    store = RedisStore(redis_alone.url, 10_000, "probe:", policy=policy)
    assert await store.get("k", time.time()) is None
    redis_alone.freeze()
    try:
        await store.get("k", time.time())
        assert store.guard.is_open
        await probe_due(store)
        failed, skipped = store.guard.failed, store.guard.skipped
        waits = [t for _, t in await asyncio.gather(*(timed(store.get("k", time.time())) for _ in range(20)))]
        ended = time.monotonic()
        # the probe went to Redis and waited out the timeout; the 19 others skipped
        assert (store.guard.failed - failed, store.guard.skipped - skipped) == (1, 19)
        assert not_before(max(waits), store.guard.timeout_s)
        # It failed: the cool-down doubled. Counted from when the probe failed (by `ended`), however long
        # this machine took since then.
        assert store.guard.is_open and store.guard.retry_in_s() + (time.monotonic() - ended) > policy.cool_down_s
    finally:
        redis_alone.thaw()
        await store.close()


async def test_the_urls_own_socket_timeout_is_kept(redis_alone) -> None:
    store = RedisStore(redis_alone.url + "?socket_timeout=0.3", 10_000, "slow:")
    assert store.guard.timeout_s == 0.3
    assert await store.get("k", time.time()) is None
    redis_alone.freeze()
    try:
        _, waited = await timed(store.get("k", time.time()))
        # the URL's 0.3 s, not the policy's 0.1 s nor redis-py's 5 s
        assert not_before(waited, 0.3, 0.02) and waited < within(0.3) and store.guard.is_open
    finally:
        redis_alone.thaw()
        await store.close()


async def test_a_stopped_redis_writes_a_line_not_one_per_request_and_comes_back(redis_alone, caplog) -> None:
    caplog.set_level(logging.WARNING)
    url = f"redis://default:secret-password-42@127.0.0.1:{redis_alone.port}/0"  # "default": any password works
    policy = GuardPolicy(TIMEOUT_S, cool_down_s=0.1, max_cool_down_s=0.4)  # probes fail several times meanwhile
    store = RedisStore(url, 10_000, "stopped:", policy=policy)
    limits = ClientLimits([key(rpm=2)], url, "stopped:", policy=policy)
    assert limits.guard is not None
    redis_alone.stop()
    try:
        async def requests_meet_the_outage() -> bool:
            """One round of requests; whether enough have met it: many skipped, and probes failed again."""
            store.put("k", entry())
            assert await store.get("k", time.time()) is None
            assert await admitted(limits, ASK)  # let through, over its limit of 2: Redis cannot count
            return (store.guard.failed >= 3 and limits.guard.failed >= 3
                    and store.guard.skipped > 100 and limits.guard.skipped > 50)

        started = time.monotonic()
        await wait_until_async(requests_meet_the_outage, "probes to fail and requests to skip", poll_s=0.005)
        lines = 1 + (time.monotonic() - started) // policy.warn_every_s  # however long that took here
        await store.settle()
        cache_lines, limit_lines = warnings_from(caplog, "firsttoken.cache"), warnings_from(caplog, "firsttoken.limits")
        assert 1 <= len(cache_lines) <= lines and 1 <= len(limit_lines) <= lines  # one per interval, with counts
        assert "ConnectionError" in cache_lines[0] and "requests are let through" in limit_lines[0]
        assert "secret-password-42" not in caplog.text and "redis://***@127.0.0.1" in caplog.text
    finally:
        redis_alone.start()  # same port, empty
    await probe_due(store, limits)
    assert [await admitted(limits, ASK) for _ in range(3)] == [True, True, False]  # the limit holds again
    store.put("k", entry())
    await store.settle()
    assert await store.get("k", time.time()) is not None
    assert not store.guard.is_open and not limits.guard.is_open
    back = [line for line in caplog.messages if "is back" in line]
    assert len(back) == 2 and "secret-password-42" not in caplog.text
    await store.close()
    await limits.close()


async def test_after_a_thaw_the_next_probe_finds_redis_and_the_limit_holds_again(redis_alone, caplog) -> None:
    caplog.set_level(logging.WARNING)
    policy = GuardPolicy(TIMEOUT_S, cool_down_s=0.2)
    limits = ClientLimits([key(rpm=2)], redis_alone.url, "thawed:", policy=policy)
    store = RedisStore(redis_alone.url, 10_000, "thawed:", policy=policy)
    redis_alone.freeze()
    try:
        assert all([await admitted(limits, ASK) for _ in range(5)])  # over the limit, let through: Redis is away
        assert limits.guard is not None and limits.guard.is_open
    finally:
        redis_alone.thaw()
    await probe_due(limits)
    assert await admitted(limits, ASK) and not limits.guard.is_open  # the probe: charged, and the circuit closed
    # 429 again: Redis counts. (By the third, whether or not Redis ran a command it took in while frozen.)
    assert not all([await admitted(limits, ASK) for _ in range(2)])
    store.put("k", entry())
    await store.settle()
    assert await store.get("k", time.time()) is not None
    assert any("rate limits: Redis at" in line and "is back" in line for line in caplog.messages)
    await store.close()
    await limits.close()


async def test_the_prompt_follower_pauses_while_redis_is_away_and_goes_on(redis_alone, caplog) -> None:
    caplog.set_level(logging.WARNING)
    policy = GuardPolicy(TIMEOUT_S, cool_down_s=0.1)
    mine = RedisStore(redis_alone.url, 10_000, "follow:", policy=policy)
    theirs = RedisStore(redis_alone.url, 10_000, "follow:", policy=policy)
    assert await mine.prompts(time.time()) == []
    following = mine.follow()
    arrived = asyncio.ensure_future(anext(following))
    try:
        await wait_until_async(lambda: blocked_in_xread(redis_alone), "the follower to block in XREAD")
        redis_alone.stop()
        stopped = time.monotonic()
        await wait_until_async(lambda: warnings_from(caplog, "firsttoken.cache"), "the follower to see it go")
        await asyncio.sleep(1.5)  # a spell in which a follower that spins would try thousands of times
        spell = time.monotonic() - stopped
        # A try a turn, and a turn at least FOLLOW_PAUSE_S (the one that failed first, and one under way)
        assert mine.guard.failed + mine.guard.skipped <= 2 + spell / FOLLOW_PAUSE_S
        assert 1 <= len(warnings_from(caplog, "firsttoken.cache")) <= 1 + spell // policy.warn_every_s
    finally:
        if redis_alone.process is None:
            redis_alone.start()
    theirs.put("after", entry(), prompt("after"))
    await theirs.settle()
    assert (await asyncio.wait_for(arrived, PATIENCE_S)).ref == "after"
    assert not mine.guard.is_open
    await following.aclose()
    await mine.close()
    await theirs.close()


async def blocked_in_xread(server: RedisServer) -> bool:
    """Whether a client of this Redis waits in XREAD now (Redis's own account)."""
    client = aioredis.Redis.from_url(server.url)
    try:
        return any(c.get("cmd") == "xread" for c in await client.client_list())
    finally:
        await client.aclose()


def test_a_redis_url_is_logged_without_its_secrets() -> None:
    assert redacted("redis://user:pw@cache.internal:6380/2?password=pw&socket_timeout=0.2") == \
        "redis://***@cache.internal:6380/2"
    assert redacted("rediss://cache.internal:6380/0") == "rediss://cache.internal:6380/0"
