"""Where cached answers live: in this process's memory, or in a SQLite file that survives restarts
(redis_store.py: in Redis, shared by several gateways). The persistent stores keep the semantic index's
prompts beside the answers, so that the index is rebuilt after a restart (or a crash) from what is there.

Both evict by TTL (an expired entry is a miss, and is swept) and by size (the least recently written go
first). The SQLite store reads on the caller's thread (a primary-key lookup in a page-cached file: a few
µs, cheaper than a hop to a thread) and writes on a thread of its own, in batches, so that a disk that
stalls never stalls the event loop; until an answer is in the file, it is read from memory.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any, Protocol

from firsttoken.cache.entry import Entry, PromptRecord
from firsttoken.private_files import private_file

log = logging.getLogger("firsttoken.cache")

FLUSH_INTERVAL_S = 0.2
FOLLOW_INTERVAL_S = 0.5
MAX_PENDING = 10_000


class Store(Protocol):
    """Reads are awaited (a shared store is across a network); writes are handed off and return at once."""

    async def get(self, key: str, now: float) -> Entry | None: ...
    def put(self, key: str, entry: Entry, prompt: PromptRecord | None = None) -> None: ...
    async def prompts(self, now: float) -> list[PromptRecord]: ...  # the live ones, oldest first
    async def delete(self, key: str) -> None: ...  # one answer (and its prompt) that must not be served
    async def purge(self, tenant: str | None = None, model: str | None = None) -> int: ...
    async def stats(self) -> list[dict[str, Any]]: ...
    async def close(self) -> None: ...


class MemoryStore:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._bytes = 0

    async def get(self, key: str, now: float) -> Entry | None:
        entry = self._entries.get(key)
        if entry is not None and entry.expires <= now:
            self._drop(key)
            return None
        return entry

    def put(self, key: str, entry: Entry, prompt: PromptRecord | None = None) -> None:
        if entry.size > self.max_bytes:
            return
        self._drop(key)
        self._entries[key] = entry
        self._bytes += entry.size
        while self._bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry.size

    async def prompts(self, now: float) -> list[PromptRecord]:
        return []  # this process's index is all there is

    async def delete(self, key: str) -> None:
        self._drop(key)

    async def purge(self, tenant: str | None = None, model: str | None = None) -> int:
        doomed = [k for k, e in self._entries.items() if matches(e.tenant, e.model, tenant, model)]
        for key in doomed:
            self._drop(key)
        return len(doomed)

    async def stats(self) -> list[dict[str, Any]]:
        totals: dict[tuple[str, str], list[int]] = {}
        for entry in self._entries.values():
            slot = totals.setdefault((entry.tenant, entry.model), [0, 0])
            slot[0] += 1
            slot[1] += entry.size
        return rows((tenant, model, n, size) for (tenant, model), (n, size) in totals.items())

    async def close(self) -> None:
        pass


_SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL, body BLOB NOT NULL, tenant TEXT NOT NULL, model TEXT NOT NULL,
    created REAL NOT NULL, expires REAL NOT NULL, size INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS answers_expires ON answers (expires);
CREATE TABLE IF NOT EXISTS prompts (
    ref TEXT PRIMARY KEY, scope TEXT NOT NULL, text TEXT NOT NULL, vector BLOB NOT NULL, expires REAL NOT NULL
);
"""


class SqliteStore:
    def __init__(self, path: str | Path, max_bytes: int) -> None:
        self.path = private_file(path)  # it holds every tenant's answers: 0600, before SQLite makes it 0644
        self.max_bytes = max_bytes
        self._db = _connect(self.path)  # the writer's (and purges')
        # Reads have a connection of their own: in WAL mode a reader never waits for a writer, so a
        # lookup on the event loop never waits for a batch being written.
        self._reader = _connect(self.path)
        # follow()'s, on asyncio's threads. A cancelled follow() leaves its query running on its thread: the
        # connection is closed under this lock, never in the middle of one (sqlite3 would crash).
        self._follower: sqlite3.Connection | None = _connect(self.path)
        self._follower_lock = threading.Lock()
        self._last_rowid: int | None = None  # the last prompt prompts() read: where follow() goes on
        # Written, not yet in the file: answered from here meanwhile (a question asked twice in a row).
        self._pending: dict[str, tuple[Entry, PromptRecord | None]] = {}
        self._lock = threading.Lock()  # the writer's connection: the writer thread, and purges from elsewhere
        self._pending_lock = threading.Lock()
        self._stop = threading.Event()
        self._writer = threading.Thread(target=self._run, name="cache-writer", daemon=True)
        self._writer.start()

    async def get(self, key: str, now: float) -> Entry | None:
        pending = self._pending.get(key)
        if pending is not None:
            return pending[0] if pending[0].expires > now else None
        row = self._reader.execute("SELECT kind, body, tenant, model, created, expires FROM answers WHERE key = ?",
                                   (key,)).fetchone()
        if row is None or row[5] <= now:
            return None
        return Entry(row[0], bytes(row[1]), row[2], row[3], row[4], row[5])

    def put(self, key: str, entry: Entry, prompt: PromptRecord | None = None) -> None:
        if entry.size <= self.max_bytes and len(self._pending) < MAX_PENDING:  # a bound if the disk stalls
            with self._pending_lock:
                self._pending[key] = (entry, prompt)

    async def prompts(self, now: float) -> list[PromptRecord]:
        return await asyncio.to_thread(self._prompts, now)

    def _prompts(self, now: float) -> list[PromptRecord]:
        self.flush()
        with self._lock:  # the writer's connection: what this process wrote is in, and nothing comes between
            self._last_rowid = int(self._db.execute("SELECT coalesce(max(rowid), 0) FROM prompts").fetchone()[0])
            rows = self._db.execute("SELECT ref, scope, text, vector, expires FROM prompts WHERE expires > ? "
                                    "AND rowid <= ? ORDER BY rowid", (now, self._last_rowid)).fetchall()
        return [PromptRecord(ref, scope, text, bytes(vector), expires) for ref, scope, text, vector, expires in rows]

    async def follow(self) -> AsyncIterator[PromptRecord]:
        """Prompts added to the file from now on, by this process or another on the same file (the workers
        of `serve --workers N`), read every FOLLOW_INTERVAL_S: each worker's paraphrase index learns what
        the others were asked, after what prompts() read. The index skips those it has."""
        last = self._last_rowid if self._last_rowid is not None else await asyncio.to_thread(self._last_prompt)
        while True:
            await asyncio.sleep(FOLLOW_INTERVAL_S)
            found, last = await asyncio.to_thread(self._prompts_after, last, time.time())
            for prompt in found:
                yield prompt

    def _last_prompt(self) -> int:
        found = self._follow_query("SELECT coalesce(max(rowid), 0) FROM prompts", ())
        return int(found[0][0]) if found else 0

    def _prompts_after(self, rowid: int, now: float) -> tuple[list[PromptRecord], int]:
        rows = self._follow_query("SELECT rowid, ref, scope, text, vector, expires FROM prompts WHERE rowid > ? "
                                  "ORDER BY rowid LIMIT 1000", (rowid,))
        last = rows[-1][0] if rows else rowid
        return [PromptRecord(ref, scope, text, bytes(vector), expires)
                for _, ref, scope, text, vector, expires in rows if expires > now], last

    def _follow_query(self, query: str, args: tuple[Any, ...]) -> list[Any]:
        with self._follower_lock:
            return [] if self._follower is None else self._follower.execute(query, args).fetchall()

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL_S):
            self.flush()

    def flush(self) -> None:
        """Write what is pending, then hold the file to its bounds."""
        if not self._pending:
            return
        batch = list(self._pending.items())  # a copy: the loop's thread may add more meanwhile
        try:
            with self._lock, self._db:
                self._db.executemany("INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                     [(k, e.kind, e.body, e.tenant, e.model, e.created, e.expires, e.size)
                                      for k, (e, _) in batch])
                self._db.executemany("INSERT OR REPLACE INTO prompts VALUES (?, ?, ?, ?, ?)",
                                     [(p.ref, p.scope, p.text, p.vector, p.expires) for _, (_, p) in batch if p])
                now = time.time()
                self._db.execute("DELETE FROM answers WHERE expires <= ?", (now,))
                self._db.execute("DELETE FROM prompts WHERE expires <= ?", (now,))  # with their answers
                total = self._db.execute("SELECT coalesce(sum(size), 0) FROM answers").fetchone()[0]
                if total > self.max_bytes:  # the oldest written go first, until it fits
                    self._db.execute(
                        "DELETE FROM answers WHERE rowid <= (SELECT rowid FROM (SELECT rowid, sum(size) OVER "
                        "(ORDER BY rowid DESC) AS kept FROM answers) WHERE kept > ? ORDER BY rowid DESC LIMIT 1)",
                        (self.max_bytes,))
                    _forget_orphans(self._db)
        except sqlite3.Error:  # a full disk: the cache misses more, nothing else changes
            log.exception("could not write %d answers to %s", len(batch), self.path)
        with self._pending_lock:
            for key, pending in batch:  # written (or given up): read from the file from now on
                if self._pending.get(key) is pending:  # not replaced by a newer answer meanwhile
                    del self._pending[key]

    async def delete(self, key: str) -> None:
        with self._pending_lock:
            self._pending.pop(key, None)
        await asyncio.to_thread(self._delete, key)

    def _delete(self, key: str) -> None:
        with self._lock, self._db:
            self._db.execute("DELETE FROM answers WHERE key = ?", (key,))
            self._db.execute("DELETE FROM prompts WHERE ref = ?", (key,))

    async def purge(self, tenant: str | None = None, model: str | None = None) -> int:
        return await asyncio.to_thread(self._purge, tenant, model)

    def _purge(self, tenant: str | None, model: str | None) -> int:
        self.flush()
        query, args = _filter(tenant, model)
        with self._lock, self._db:
            dropped = self._db.execute(f"DELETE FROM answers{query}", args).rowcount
            _forget_orphans(self._db)
            return dropped

    async def stats(self) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._stats)

    def _stats(self) -> list[dict[str, Any]]:
        self.flush()
        with self._lock:
            return rows(self._db.execute("SELECT tenant, model, count(*), sum(size) FROM answers WHERE expires > ? "
                                          "GROUP BY tenant, model", (time.time(),)).fetchall())

    async def close(self) -> None:
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        self._stop.set()
        self._writer.join(timeout=10)
        self.flush()
        self._db.close()
        self._reader.close()
        with self._follower_lock:
            if self._follower is not None:
                self._follower.close()
                self._follower = None


def _forget_orphans(db: sqlite3.Connection) -> None:
    """Prompts whose answers are gone (expired, evicted, purged)."""
    db.execute("DELETE FROM prompts WHERE ref NOT IN (SELECT key FROM answers)")


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(str(path), timeout=10, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(_SCHEMA)
    return db


def _filter(tenant: str | None, model: str | None) -> tuple[str, list[str]]:
    clauses, args = [], []
    if tenant is not None:
        clauses.append("tenant = ?")
        args.append(tenant)
    if model is not None:
        clauses.append("(model = ? OR model LIKE ?)")
        args += [model, f"%/{model}"]
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), args


def matches(owner: str, route: str, tenant: str | None, model: str | None) -> bool:
    """Whether an answer kept for `owner` from `route` is among a purge's `tenant` and `model`."""
    return (tenant is None or owner == tenant) and (model is None or route == model or route.endswith(f"/{model}"))


def rows(groups: Iterable[tuple[str, str, int, int]]) -> list[dict[str, Any]]:
    """Per tenant and model: entries and bytes."""
    return [{"tenant": t, "model": m, "entries": n, "bytes": size} for t, m, n, size in sorted(groups)]
