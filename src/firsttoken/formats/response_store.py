"""The responses the gateway keeps, so that a Responses request can continue one (`previous_response_id`):
in a SQLite file, under the tenant whose request made it, each response's own items (its input, then its
output) and the response it continued. A conversation is read back by following those links to its first
response: a long one costs a row per turn, not the whole conversation again with every turn. Another tenant
asking for an id is told it does not exist, as is anyone after the response, or one it continued, expired
or was pushed out by newer ones.

Reads and writes are on the event loop, a row at a time: tens of microseconds each on a local file in WAL
mode. A response is in the file before its client sees it complete, so that the next turn finds it
whichever worker process it reaches; batching the writes would break that (docs/benchmarks.md, "Three
client formats").
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
    parent TEXT,
    created REAL NOT NULL,
    items BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_created ON responses (created);
"""
_PRUNE_EVERY = 256  # writes between prunings: pruning is a range delete over the created index
MAX_TURNS = 10_000  # links followed at most: a conversation longer than that is not continued
# The conversation ending at a response, oldest turn first; its first row must have no parent (else a turn
# in between is gone).
_CHAIN = """
WITH RECURSIVE chain(parent, items, depth) AS (
    SELECT parent, items, 0 FROM responses WHERE id = :id AND tenant = :tenant AND created > :after
    UNION ALL
    SELECT r.parent, r.items, chain.depth + 1 FROM responses r JOIN chain ON r.id = chain.parent
    WHERE r.tenant = :tenant AND r.created > :after AND chain.depth < :turns
)
SELECT parent, items FROM chain ORDER BY depth DESC
"""


class ResponseStore:
    def __init__(self, path: str | Path, max_responses: int, max_age_s: float) -> None:
        self.db = sqlite3.connect(private_file(path), isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)
        columns = {column for _, column, *_ in self.db.execute("PRAGMA table_info(responses)")}
        if "parent" not in columns:  # a file from before responses were kept a turn a row
            self.db.execute("ALTER TABLE responses ADD COLUMN parent TEXT")
        self.max_responses = max_responses
        self.max_age_s = max_age_s
        self._writes = 0

    def get(self, tenant: str, response_id: str) -> list[dict[str, Any]] | None:
        """The conversation up to and including the response; None when there is none of this tenant's, or a
        turn of it is gone."""
        rows = self.db.execute(_CHAIN, {"id": response_id, "tenant": tenant, "after": time.time() - self.max_age_s,
                                        "turns": MAX_TURNS}).fetchall()
        if not rows or rows[0][0] is not None:
            return None
        return [item for _, items in rows for item in orjson.loads(items)]

    def put(self, tenant: str, response_id: str, items: list[dict[str, Any]], parent: str | None = None) -> None:
        """A response's own items (its input, then its output), and the response it continued."""
        self.db.execute("INSERT OR REPLACE INTO responses (id, tenant, parent, created, items) VALUES (?, ?, ?, ?, ?)",
                        (response_id, tenant, parent, time.time(), orjson.dumps(items)))
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
