"""The responses the gateway keeps, so that a Responses request can continue one (`previous_response_id`):
each response's whole conversation (its input items, the earlier responses' before them, then its output
items), in a SQLite file, under the tenant whose request made it. Another tenant asking for the id is told
it does not exist, as is anyone after the response expired or was pushed out by newer ones.

Reads and writes are on the event loop: one indexed row each, tens of microseconds on a local file in WAL
mode (the journey log, which writes in batches, is the one that needs a thread).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import orjson

from firsttoken.private_files import private_file

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    created REAL NOT NULL,
    items BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_created ON responses (created);
"""
_PRUNE_EVERY = 256  # writes between prunings: pruning is a range delete over the created index


class ResponseStore:
    def __init__(self, path: str | Path, max_responses: int, max_age_s: float) -> None:
        self.db = sqlite3.connect(private_file(path), isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)
        self.max_responses = max_responses
        self.max_age_s = max_age_s
        self._writes = 0

    def get(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None:
        """The conversation up to and including the response; None when there is none of this tenant's."""
        row = self.db.execute("SELECT items FROM responses WHERE id = ? AND tenant = ? AND created > ?",
                              (response_id, tenant, time.time() - self.max_age_s)).fetchone()
        return orjson.loads(row[0]) if row is not None else None

    def put(self, tenant: str, response_id: str, items: list[dict[str, Any]]) -> None:
        self.db.execute("INSERT OR REPLACE INTO responses (id, tenant, created, items) VALUES (?, ?, ?, ?)",
                        (response_id, tenant, time.time(), orjson.dumps(items)))
        self._writes += 1
        if self._writes % _PRUNE_EVERY == 0:
            self.prune()

    def prune(self) -> None:
        """Forget the expired, then the oldest past the bound."""
        self.db.execute("DELETE FROM responses WHERE created <= ?", (time.time() - self.max_age_s,))
        self.db.execute("DELETE FROM responses WHERE id IN (SELECT id FROM responses ORDER BY created DESC "
                        "LIMIT -1 OFFSET ?)", (self.max_responses,))

    def __len__(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        self.db.close()
