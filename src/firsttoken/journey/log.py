"""The journey log: every finished request's journey in a SQLite file (WAL), so that the record
survives restarts and `firsttoken journeys` can summarise it.

Only the sink's thread writes (in batches, one transaction each); readers (the CLI) open their own
connection. The table is bounded by rows and by age, pruned after writes.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from firsttoken.journey.attribution import Journey

SCHEMA = """
CREATE TABLE IF NOT EXISTS journeys (
    id TEXT PRIMARY KEY,
    at REAL NOT NULL,               -- unix time the request arrived
    tenant TEXT, model TEXT, route TEXT, upstream TEXT,
    stream INTEGER, status INTEGER, attempts INTEGER, reused INTEGER,
    client_rtt REAL, gateway REAL, cache REAL, connect REAL, ttfb REAL, rtt REAL, floor REAL,
    distance_tax REAL, queue_prefill REAL, ttft REAL, decode REAL, e2e REAL,
    output_tokens INTEGER, tokens_per_s REAL, itl_max REAL,
    upstream_timing TEXT,           -- the upstream's own Server-Timing, as JSON
    verdict TEXT
);
CREATE INDEX IF NOT EXISTS journeys_at ON journeys (at);
CREATE INDEX IF NOT EXISTS journeys_upstream_at ON journeys (upstream, at);
"""

COLUMNS = ("id", "at", "tenant", "model", "route", "upstream", "stream", "status", "attempts", "reused",
           "client_rtt", "gateway", "cache", "connect", "ttfb", "rtt", "floor", "distance_tax", "queue_prefill",
           "ttft", "decode", "e2e", "output_tokens", "tokens_per_s", "itl_max", "upstream_timing", "verdict")
_INSERT = f"INSERT OR REPLACE INTO journeys ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"


def connect(path: str | Path) -> sqlite3.Connection:
    db = sqlite3.connect(str(path), timeout=10, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across a process crash, fast
    db.executescript(SCHEMA)
    return db


def row(journey: Journey, at: float) -> tuple[Any, ...]:
    p = journey.phases
    return (journey.request_id, at, journey.tenant, journey.model, journey.route, journey.upstream,
            int(journey.stream), journey.status, journey.attempts, int(journey.reused_connection),
            p.client_rtt, p.gateway, p.cache, p.connect, p.ttfb, p.rtt, p.floor, p.distance_tax, p.queue_prefill,
            p.ttft, p.decode, p.e2e, journey.output_tokens, journey.tokens_per_s, journey.itl_max_ms,
            orjson.dumps(journey.upstream_timing).decode() if journey.upstream_timing else None, journey.verdict)


class JourneyLog:
    def __init__(self, path: str | Path, max_rows: int, max_age_s: float) -> None:
        self.path = Path(path)
        self.max_rows = max_rows
        self.max_age_s = max_age_s
        self.db = connect(self.path)
        self._writes = 0

    def write(self, rows: Iterable[tuple[Any, ...]]) -> None:
        with self.db:
            self.db.executemany(_INSERT, rows)
        self._writes += 1
        if self._writes % 20 == 1:  # pruning scans an index: now and then is enough
            self.prune(time.time())

    def prune(self, now: float) -> None:
        with self.db:
            self.db.execute("DELETE FROM journeys WHERE at < ?", (now - self.max_age_s,))
            self.db.execute("DELETE FROM journeys WHERE at <= (SELECT at FROM journeys ORDER BY at DESC "
                            "LIMIT 1 OFFSET ?)", (self.max_rows,))

    def close(self) -> None:
        self.db.close()


def read(path: str | Path, since: float | None = None, model: str | None = None) -> list[dict[str, Any]]:
    """Journeys from a log file, oldest first, as dicts keyed by COLUMNS."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        query, args = f"SELECT {', '.join(COLUMNS)} FROM journeys WHERE 1=1", []
        if since is not None:
            query += " AND at >= ?"
            args.append(since)
        if model is not None:
            query += " AND (model = ? OR route LIKE ?)"
            args += [model, f"%/{model}"]
        return [dict(zip(COLUMNS, r, strict=True)) for r in db.execute(query + " ORDER BY at", args)]
    finally:
        db.close()
