"""The journey log: every finished request's journey in a SQLite file (WAL), so that the record
survives restarts and `firsttoken journeys` can summarise it.

Only the sink's thread writes (in batches, one transaction each); readers (the CLI) open their own
connection. The table is bounded by rows and by age, pruned after writes.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from firsttoken.journey.attribution import Journey, Phases, tokens_per_s, verdict
from firsttoken.journey.server_timing import parse_server_timing
from firsttoken.journey.timeline import Timeline
from firsttoken.private_files import private_file
from firsttoken.sqlite_rows import RowInserter

# Rows are appended in rowid order and looked up by time, never by id (GET /v1/journeys/{id} reads memory):
# one index, on a column that only grows, so an insert touches the rightmost pages of two B-trees.
# (A TEXT primary key, as files from before this schema have, is a third B-tree written out of order.)
SCHEMA = """
CREATE TABLE IF NOT EXISTS journeys (
    id TEXT NOT NULL,
    at REAL NOT NULL,               -- unix time the request arrived
    tenant TEXT, model TEXT, route TEXT, upstream TEXT,
    stream INTEGER, status INTEGER, attempts INTEGER, reused INTEGER,
    client_rtt REAL, gateway REAL, cache REAL, pool REAL, connect REAL, ttfb REAL, rtt REAL, floor REAL,
    distance_tax REAL, queue_prefill REAL, ttft REAL, decode REAL, e2e REAL,
    output_tokens INTEGER, tokens_per_s REAL, itl_max REAL,
    upstream_timing TEXT,           -- the upstream's own Server-Timing header, as it sent it
    hedge TEXT,                     -- hedge-of=<first target> when a hedge won; hedged-by=<hedge> when it lost
    error_code TEXT, error TEXT,    -- how it failed: an error answered, or a stream broken after its 200
    cached_tokens INTEGER,          -- of the input, what the provider's prompt cache served
    api TEXT,                       -- the API the client spoke: chat | messages | responses | embeddings
    cache_outcome TEXT,             -- x-firsttoken-cache: bypass, miss, hit, hit; joined, semantic-hit; similarity=…
    input_tokens INTEGER,           -- the upstream's usage (cached_tokens is of these)
    usd REAL,                       -- what it cost (NULL: its route has no price); the spend ledger has the rest
    saved_usd REAL                  -- what the edge (cache, single flight, sizing) saved it
);
CREATE INDEX IF NOT EXISTS journeys_at ON journeys (at);
"""

COLUMNS = ("id", "at", "tenant", "model", "route", "upstream", "stream", "status", "attempts", "reused",
           "client_rtt", "gateway", "cache", "connect", "ttfb", "rtt", "floor", "distance_tax", "queue_prefill",
           "ttft", "decode", "e2e", "output_tokens", "tokens_per_s", "itl_max", "upstream_timing", "hedge",
           "error_code", "error", "pool", "cached_tokens", "api", "cache_outcome", "input_tokens", "usd", "saved_usd")
# Columns added since the first schema, which a file written before them gains when it is opened.
_ADDED = {"hedge": "TEXT", "error_code": "TEXT", "error": "TEXT", "pool": "REAL", "cached_tokens": "INTEGER",
          "api": "TEXT", "cache_outcome": "TEXT", "input_tokens": "INTEGER", "usd": "REAL", "saved_usd": "REAL"}

_ROWS = RowInserter("journeys", COLUMNS)

# sqlite3 binds int, float and str directly, but sends None through its adapter lookup, which fails twice
# (no `__adapt__`, no `__conform__`) and formats an AttributeError message each time: 3 300 instructions
# per NULL, a row has four to ten of them, and that was a third of the insert's cost (callgrind,
# bench/xray_pieces.py). Registered, the adapter is found at the first lookup; it binds NULL as before.
sqlite3.register_adapter(type(None), lambda none: none)


def connect(path: str | Path) -> sqlite3.Connection:
    db = sqlite3.connect(str(path), timeout=10, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across a process crash, fast
    db.executescript(SCHEMA)
    present = {column for _, column, *_ in db.execute("PRAGMA table_info(journeys)")}
    for column, kind in _ADDED.items():
        if column not in present:
            db.execute(f"ALTER TABLE journeys ADD COLUMN {column} {kind}")
    return db


def row(timeline: Timeline, p: Phases, at: float) -> tuple[Any, ...]:
    """The log's row for a finished request: its phases and facts, no verdict (that is words, made on reading)."""
    cost = timeline.cost
    return (timeline.request_id, at, timeline.tenant, timeline.model, timeline.route, timeline.upstream,
            int(timeline.stream), timeline.status, timeline.attempts, int(timeline.reused),
            p.client_rtt, p.gateway, p.cache, p.connect, p.ttfb, p.rtt, p.floor, p.distance_tax, p.queue_prefill,
            p.ttft, p.decode, p.e2e, timeline.output_tokens, tokens_per_s(timeline, p),
            timeline.max_gap * 1000.0 if timeline.token_events > 1 else None, timeline.upstream_timing,
            timeline.hedge.decode().removeprefix("; ") or None, timeline.error_code or None, timeline.error or None,
            p.pool, timeline.cached_tokens, timeline.api, timeline.cache.header(timeline.similarity).decode(),
            timeline.input_tokens, cost.usd if cost is not None else None, cost.saved_usd if cost is not None else None)


class JourneyLog:
    def __init__(self, path: str | Path, max_rows: int, max_age_s: float) -> None:
        self.path = private_file(path)  # every tenant's requests: 0600, before SQLite makes it 0644
        self.max_rows = max_rows
        self.max_age_s = max_age_s
        self.db = connect(self.path)
        self._writes = 0

    def write(self, rows: Sequence[tuple[Any, ...]]) -> None:
        with self.db:
            _ROWS.insert(self.db, rows)
        self._writes += 1
        if self._writes % 20 == 1:  # now and then is enough for a bound
            self.prune(time.time())

    def prune(self, now: float) -> None:
        """Drop rows past the age and past the newest `max_rows`: both walk only what they delete."""
        with self.db:
            self.db.execute("DELETE FROM journeys WHERE at < ?", (now - self.max_age_s,))
            self.db.execute("DELETE FROM journeys WHERE rowid <= (SELECT max(rowid) FROM journeys) - ?",
                            (self.max_rows,))

    def close(self) -> None:
        self.db.close()


def read(path: str | Path, since: float | None = None, model: str | None = None,
         newest: int | None = None) -> list[dict[str, Any]]:
    """Journeys from a log file, oldest first, as dicts keyed by COLUMNS (only the `newest` ones, if given)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        # A log written before a column was added lacks it until a gateway opens it for writing: NULL then.
        present = {column for _, column, *_ in db.execute("PRAGMA table_info(journeys)")}
        selected = ", ".join(column if column in present else f"NULL AS {column}" for column in COLUMNS)
        query, args = f"SELECT {selected} FROM journeys WHERE 1=1", list[float | int | str]()
        if since is not None:
            query += " AND at >= ?"
            args.append(since)
        if model is not None:
            query += " AND (model = ? OR route LIKE ?)"
            args += [model, f"%/{model}"]
        if newest is not None:
            rows = db.execute(query + " ORDER BY at DESC LIMIT ?", [*args, newest]).fetchall()[::-1]
        else:
            rows = db.execute(query + " ORDER BY at", args).fetchall()
        return [dict(zip(COLUMNS, r, strict=True)) for r in rows]
    finally:
        db.close()


def journey_of(found: dict[str, Any]) -> Journey:
    """A row read back as the journey it was, verdict included (the log keeps no handshake steps and no input
    token count: those are None)."""
    p = Phases(*(found[name] if found[name] is not None or name in _MAY_BE_NONE else 0.0 for name in _PHASES))
    journey = Journey(found["id"], "chat" if found.get("api") != "embeddings" else "embeddings",
                      found["tenant"] or "", found["model"] or "", found["route"] or "", found["upstream"] or "",
                      bool(found["stream"]), found["status"] or 0, found["attempts"] or 0, bool(found["reused"]), p,
                      found["output_tokens"], None, found.get("cached_tokens"), 0, found["tokens_per_s"],
                      found["itl_max"], parse_server_timing(found["upstream_timing"]), None,
                      found.get("cache_outcome") or "bypass", found.get("hedge") or "",
                      {"code": found["error_code"], "message": found.get("error") or ""}
                      if found.get("error_code") else None, found.get("api") or "chat")
    provider = p.ttfb - p.rtt if p.rtt is not None else None
    return Journey(**{**journey.__dict__, "verdict": verdict(journey, provider)})


_PHASES = tuple(f.name for f in fields(Phases))  # the log's columns are named as the phases are
_MAY_BE_NONE = {"client_rtt", "rtt", "floor", "distance_tax", "queue_prefill", "ttft", "decode"}
