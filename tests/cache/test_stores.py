"""Every store (memory, SQLite, a real Redis): a hit until the TTL, a bound on bytes (the oldest written
go first), purges and stats by tenant and model; SQLite and Redis keep answers across a restart of the
gateway's store, with the semantic index's prompts beside them."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from dataclasses import astuple

import numpy as np
import pytest

from firsttoken.cache.entry import Entry, PromptRecord
from firsttoken.cache.redis_store import RedisStore
from firsttoken.cache.stores import MemoryStore, SqliteStore
from support.waiting import PATIENCE_S, wait_until_async


def entry(body: bytes = b'{"choices":[]}', tenant: str = "app", model: str = "up/m", ttl: float = 60) -> Entry:
    now = time.time()
    return Entry("json", body, tenant, model, now, now + ttl)


PREFIXES = itertools.count()


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request, tmp_path):
    if request.param == "memory":
        made = MemoryStore(1000)
    elif request.param == "sqlite":
        made = SqliteStore(tmp_path / "cache.db", 1000)
    else:  # a prefix of its own: the server is shared by the session
        made = RedisStore(request.getfixturevalue("redis_server").url, 1000, f"t{next(PREFIXES)}:")
    yield made
    await made.close()


async def settle(store) -> None:
    if isinstance(store, SqliteStore):
        store.flush()
    elif isinstance(store, RedisStore):
        await store.settle()


async def test_an_answer_is_a_hit_until_it_expires(store) -> None:
    store.put("k", entry(ttl=60))
    store.put("short", entry(ttl=0.05))
    await settle(store)
    now = time.time()
    found = await store.get("k", now)
    assert found is not None and found.body == b'{"choices":[]}' and found.tenant == "app"
    assert await store.get("missing", now) is None
    assert await store.get("short", now + 1) is None and await store.get("k", now + 61) is None


async def test_a_deleted_answer_is_gone_and_frees_its_bytes(store) -> None:
    store.put("kept", entry(b"y" * 300))
    store.put("doomed", entry(b"x" * 600))
    await settle(store)
    await store.delete("doomed")
    await store.delete("never-there")  # nothing to delete is no error
    store.put("after", entry(b"z" * 600))  # the oldest ("kept") stays only if the deleted bytes were given back
    await settle(store)
    now = time.time()
    assert await store.get("doomed", now) is None
    assert (await store.get("kept", now)) is not None and (await store.get("after", now)) is not None


async def test_bytes_are_bounded_and_the_oldest_written_go_first(store) -> None:
    for i in range(5):
        store.put(f"k{i}", entry(b"x" * 300))
        await settle(store)
    now = time.time()
    assert [await store.get(f"k{i}", now) is not None for i in range(5)] == [False, False, True, True, True]
    store.put("huge", entry(b"x" * 2000))  # larger than the whole store: never kept
    await settle(store)
    assert await store.get("huge", now) is None and await store.get("k4", now) is not None


async def test_purge_and_stats_by_tenant_and_model(store) -> None:
    store.put("a1", entry(tenant="a", model="openai/gpt-4o-mini"))
    store.put("a2", entry(tenant="a", model="sim/llama-3.1-8b"))
    store.put("b1", entry(tenant="b", model="openai/gpt-4o-mini"))
    await settle(store)
    assert [(s["tenant"], s["model"], s["entries"]) for s in await store.stats()] == [
        ("a", "openai/gpt-4o-mini", 1), ("a", "sim/llama-3.1-8b", 1), ("b", "openai/gpt-4o-mini", 1)]
    assert await store.purge(tenant="a", model="gpt-4o-mini") == 1
    assert await store.purge(tenant="b") == 1
    now = time.time()
    assert await store.get("a2", now) is not None
    assert await store.get("a1", now) is None and await store.get("b1", now) is None


async def test_answers_outlive_the_store_that_wrote_them(tmp_path, redis_server) -> None:
    for make in (lambda: SqliteStore(tmp_path / "cache.db", 10_000),
                 lambda: RedisStore(redis_server.url, 10_000, "restart:")):
        first = make()
        first.put("k", entry(b"kept"))
        await first.close()  # writes what is pending
        second = make()
        try:
            found = await second.get("k", time.time())
            assert found is not None and found.body == b"kept"
        finally:
            await second.close()


async def test_two_redis_stores_share_one_bound(redis_server) -> None:
    """Two gateways on one Redis: the byte bound holds across both, and each sees the other's answers."""
    one, two = RedisStore(redis_server.url, 1000, "shared:"), RedisStore(redis_server.url, 1000, "shared:")
    try:
        for i in range(6):
            (one if i % 2 else two).put(f"k{i}", entry(b"x" * 300))
            await one.settle()
            await two.settle()
        now = time.time()
        assert [await one.get(f"k{i}", now) is not None for i in range(6)] == [False] * 3 + [True] * 3
        assert sum(s["bytes"] for s in await two.stats()) == 900
    finally:
        await one.close()
        await two.close()


def prompt(ref: str, expires_in: float = 60) -> PromptRecord:
    return PromptRecord(ref, "scope", f"question {ref}", np.full(4, 0.5, dtype=np.float32).tobytes(),
                        time.time() + expires_in)


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_prompts_are_kept_beside_their_answers_and_go_with_them(kind, tmp_path, redis_server) -> None:
    if kind == "sqlite":
        store = SqliteStore(tmp_path / "cache.db", 1000)
    else:
        store = RedisStore(redis_server.url, 1000, f"t{next(PREFIXES)}:")
    store.put("a", entry(tenant="app"), prompt("a"))
    store.put("b", entry(tenant="other"), prompt("b"))
    store.put("c", entry(ttl=0.05), prompt("c", expires_in=0.05))
    await settle(store)
    time.sleep(0.1)
    kept = await store.prompts(time.time())
    kept.sort(key=lambda p: p.ref)  # Redis writes go out as concurrent tasks
    assert [p.ref for p in kept] == ["a", "b"]
    assert astuple(kept[0])[:3] == ("a", "scope", "question a")
    assert np.frombuffer(kept[0].vector, dtype=np.float32).tolist() == [0.5] * 4
    if kind == "sqlite":  # Redis forgets prompts when a lookup finds their answer gone
        await store.purge(tenant="other")
        assert [p.ref for p in await store.prompts(time.time())] == ["a"]
    await store.close()


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_a_shared_store_follows_the_prompts_another_process_adds(kind, tmp_path, request) -> None:
    """Two stores on one file (the workers of `serve --workers N`) or one Redis (replicas): each one's
    paraphrase index learns what the other was asked, from where its prompts() left off."""
    if kind == "sqlite":
        mine, theirs = SqliteStore(tmp_path / "cache.db", 10_000), SqliteStore(tmp_path / "cache.db", 10_000)
    else:
        prefix, url = f"t{next(PREFIXES)}:", request.getfixturevalue("redis_server").url
        mine, theirs = RedisStore(url, 10_000, prefix), RedisStore(url, 10_000, prefix)
    theirs.put("before", entry(), prompt("before"))
    await settle(theirs)
    assert [p.ref for p in await mine.prompts(time.time())] == ["before"]
    following = mine.follow()
    arrived = asyncio.ensure_future(anext(following))
    theirs.put("after", entry(), prompt("after"))
    assert (await asyncio.wait_for(arrived, 5)).ref == "after"  # not "before" again
    await following.aclose()
    await mine.close()
    await theirs.close()


class HeldReads:
    """The follower's connection, each read held until the test lets it go: a read under way, for certain."""

    def __init__(self, db) -> None:
        self.db, self.reading, self.go, self.events = db, threading.Event(), threading.Event(), []

    def execute(self, query: str, args: tuple):
        self.reading.set()
        self.go.wait(PATIENCE_S)
        found = self.db.execute(query, args)
        self.events.append("read")
        return found

    def close(self) -> None:
        self.events.append("closed")
        self.db.close()


async def test_a_sqlite_store_closes_while_its_follower_reads(tmp_path) -> None:
    """A cancelled follow() leaves its read running on a thread: closing the store waits for it."""
    store = SqliteStore(tmp_path / "cache.db", 10_000)
    store.put("k", entry(), prompt("k"))
    held = store._follower = HeldReads(store._follower)
    following = asyncio.ensure_future(anext(store.follow()))
    await wait_until_async(held.reading.is_set, "the follower's read to be under way")
    following.cancel()
    closing = asyncio.ensure_future(store.close())
    await wait_until_async(store._stop.is_set, "the store to begin closing")  # while the read still runs
    held.go.set()
    await closing
    assert held.events == ["read", "closed"]  # the connection closed after its read, not under it
    assert store._follow_query("SELECT 1", ()) == []
