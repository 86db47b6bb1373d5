"""Both stores: a hit until the TTL, a bound on bytes (the oldest written go first), purges and stats by
tenant and model; the SQLite store keeps its answers across a restart."""

from __future__ import annotations

import time

import pytest

from firsttoken.cache.entry import Entry
from firsttoken.cache.stores import MemoryStore, SqliteStore


def entry(body: bytes = b'{"choices":[]}', tenant: str = "app", model: str = "up/m", ttl: float = 60) -> Entry:
    now = time.time()
    return Entry("json", body, tenant, model, now, now + ttl)


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    made = MemoryStore(1000) if request.param == "memory" else SqliteStore(tmp_path / "cache.db", 1000)
    yield made
    made.close()


def settle(store) -> None:
    if isinstance(store, SqliteStore):
        store.flush()


def test_an_answer_is_a_hit_until_it_expires(store) -> None:
    store.put("k", entry(ttl=60))
    store.put("short", entry(ttl=0.05))
    settle(store)
    now = time.time()
    assert store.get("k", now).body == b'{"choices":[]}' and store.get("missing", now) is None
    assert store.get("short", now + 1) is None and store.get("k", now + 61) is None


def test_bytes_are_bounded_and_the_oldest_written_go_first(store) -> None:
    for i in range(5):
        store.put(f"k{i}", entry(b"x" * 300))
        settle(store)
    now = time.time()
    assert [store.get(f"k{i}", now) is not None for i in range(5)] == [False, False, True, True, True]
    store.put("huge", entry(b"x" * 2000))  # larger than the whole store: never kept
    settle(store)
    assert store.get("huge", now) is None and store.get("k4", now) is not None


def test_purge_and_stats_by_tenant_and_model(store) -> None:
    store.put("a1", entry(tenant="a", model="openai/gpt-4o-mini"))
    store.put("a2", entry(tenant="a", model="sim/llama-3.1-8b"))
    store.put("b1", entry(tenant="b", model="openai/gpt-4o-mini"))
    settle(store)
    assert [(s["tenant"], s["model"], s["entries"]) for s in store.stats()] == [
        ("a", "openai/gpt-4o-mini", 1), ("a", "sim/llama-3.1-8b", 1), ("b", "openai/gpt-4o-mini", 1)]
    assert store.purge(tenant="a", model="gpt-4o-mini") == 1
    assert store.purge(tenant="b") == 1
    now = time.time()
    assert store.get("a2", now) is not None and store.get("a1", now) is None and store.get("b1", now) is None


def test_the_sqlite_store_survives_a_restart(tmp_path) -> None:
    first = SqliteStore(tmp_path / "cache.db", 10_000)
    first.put("k", entry(b"kept"))
    first.close()  # writes what is pending
    second = SqliteStore(tmp_path / "cache.db", 10_000)
    try:
        assert second.get("k", time.time()).body == b"kept"
    finally:
        second.close()
