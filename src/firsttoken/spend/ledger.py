"""The spend ledger: every request's cost in a SQLite file (WAL), and each key's totals by day, so that
spend survives restarts and crashes, `firsttoken spend` can report it, and budgets can be held to it.

A request's row is durable the moment the request ends: it is appended to a write-ahead journal
(spend/journal.py, one write() on the event loop) and counted in memory. A thread of the ledger's own
commits the rows in batches every FLUSH_S, then deletes the journal that held them; rows a killed process
left in its journal are committed by the next process to open the ledger. The per-day totals are kept by
a trigger in the same transaction as the rows, and a row's key is its request's id (INSERT OR IGNORE), so
a request is never counted twice, replayed or not. (The trigger is SQLite's C, run with the GIL let go;
summing a batch's rows in Python instead took as much CPU, 4.4–4.7 µs a row, and held the GIL throughout.)

Budgets read the totals from memory (`spent`): what has been committed (this process's commits as it
makes them, and every REFRESH_S every process's, read back from the file), plus what this process has
recorded and not yet committed. One lock guards those maps and the journal; it is held for dictionary
updates and one write().
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from firsttoken.private_files import private_file
from firsttoken.spend.journal import Journal, orphans
from firsttoken.sqlite_rows import RowInserter

log = logging.getLogger("firsttoken.spend")

FLUSH_S = 0.2  # how often the thread commits what the journal holds
REFRESH_S = 0.5  # how often the totals are read back, for the spend of other processes sharing the file

SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    id TEXT PRIMARY KEY,            -- the request's id (x-request-id): a request is counted once
    at REAL NOT NULL,               -- unix time it arrived
    day TEXT NOT NULL,              -- its UTC day, YYYY-MM-DD: budgets and totals are by UTC day and month
    key TEXT NOT NULL,              -- the client key's name (default: no keys configured)
    route TEXT NOT NULL,            -- upstream/model that answered ('' when none did)
    api TEXT,
    input_tokens INTEGER NOT NULL, cached_input_tokens INTEGER NOT NULL, cache_write_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,
    estimated INTEGER NOT NULL,     -- 1: the upstream gave no usage; the tokens are the gateway's estimate
    usd REAL,                       -- NULL: the route has no price
    saved_by TEXT,                  -- cache | joined | sized
    saved_tokens INTEGER NOT NULL, saved_usd REAL NOT NULL, saved_s REAL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS requests_at ON requests (at);
CREATE TABLE IF NOT EXISTS days (
    key TEXT NOT NULL, day TEXT NOT NULL, route TEXT NOT NULL,
    requests INTEGER NOT NULL, unpriced INTEGER NOT NULL, estimated INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL, cached_input_tokens INTEGER NOT NULL, cache_write_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL, usd REAL NOT NULL,
    cache_hits INTEGER NOT NULL, joined INTEGER NOT NULL, sized INTEGER NOT NULL,
    saved_tokens INTEGER NOT NULL, saved_usd REAL NOT NULL, saved_s REAL NOT NULL,
    PRIMARY KEY (key, day, route)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS requests_counted AFTER INSERT ON requests BEGIN
    INSERT INTO days VALUES (NEW.key, NEW.day, NEW.route, 1, NEW.usd IS NULL, NEW.estimated, NEW.input_tokens,
        NEW.cached_input_tokens, NEW.cache_write_tokens, NEW.output_tokens, NEW.reasoning_tokens,
        coalesce(NEW.usd, 0), NEW.saved_by IS 'cache', NEW.saved_by IS 'joined', NEW.saved_by IS 'sized',
        NEW.saved_tokens, NEW.saved_usd, coalesce(NEW.saved_s, 0))
    ON CONFLICT (key, day, route) DO UPDATE SET
        requests = requests + 1, unpriced = unpriced + excluded.unpriced, estimated = estimated + excluded.estimated,
        input_tokens = input_tokens + excluded.input_tokens,
        cached_input_tokens = cached_input_tokens + excluded.cached_input_tokens,
        cache_write_tokens = cache_write_tokens + excluded.cache_write_tokens,
        output_tokens = output_tokens + excluded.output_tokens,
        reasoning_tokens = reasoning_tokens + excluded.reasoning_tokens, usd = usd + excluded.usd,
        cache_hits = cache_hits + excluded.cache_hits, joined = joined + excluded.joined,
        sized = sized + excluded.sized, saved_tokens = saved_tokens + excluded.saved_tokens,
        saved_usd = saved_usd + excluded.saved_usd, saved_s = saved_s + excluded.saved_s;
END;
"""

COLUMNS = ("id", "at", "day", "key", "route", "api", "input_tokens", "cached_input_tokens", "cache_write_tokens",
           "output_tokens", "reasoning_tokens", "estimated", "usd", "saved_by", "saved_tokens", "saved_usd", "saved_s")
_ROWS = RowInserter("requests", COLUMNS, "INSERT OR IGNORE")
_ID, _DAY, _KEY, _USD = COLUMNS.index("id"), COLUMNS.index("day"), COLUMNS.index("key"), COLUMNS.index("usd")


_DAY_S = 86_400  # unix time has no leap seconds: every UTC day is this many of its seconds
_last_day = (-1.0, "")  # the last day named, by its first second: strftime took most of a microsecond


def utc_day(at: float) -> str:
    """YYYY-MM-DD, the UTC day of unix time `at`."""
    global _last_day
    start = at - at % _DAY_S
    if _last_day[0] != start:
        _last_day = (start, time.strftime("%Y-%m-%d", time.gmtime(at)))
    return _last_day[1]


def connect(path: str | Path) -> sqlite3.Connection:
    db = sqlite3.connect(str(path), timeout=10, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a commit survives the process's crash
    db.executescript(SCHEMA)
    return db


Totals = dict[str, dict[str, float]]  # key → UTC day → USD


class SpendLedger:
    """Rows in, totals out. `path` None keeps the totals in memory only (nothing survives a restart)."""

    def __init__(self, path: str | Path | None, max_age_days: float = 400.0) -> None:
        self.path = private_file(path) if path is not None else None  # every key's spend: 0600
        self.max_age_s = max_age_days * 86400
        self._db = connect(self.path) if self.path is not None else None
        self._lock = threading.Lock()
        self._committed: Totals = {}  # every process's, as last read back from the file
        self._pending: Totals = defaultdict(lambda: defaultdict(float))  # this process's, not yet committed
        self._queue: list[tuple[Any, ...]] = []
        self._journal: Journal | None = None
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="spend-ledger", daemon=True)
        self.written = self.failed = self.replayed = 0
        if self.path is not None:
            self._replay_orphans(self.path)
            self._committed = self._read_totals()

    def start(self) -> None:
        if self.path is not None:
            self._journal = Journal(self.path)
            self._thread.start()

    def record(self, row: tuple[Any, ...]) -> None:
        """A finished request's row (COLUMNS' order), from the event loop: counted at once, journaled (durable
        from here on), committed within FLUSH_S."""
        with self._lock:
            self._pending[row[_KEY]][row[_DAY]] += row[_USD] or 0.0
            if self._journal is None:  # in memory only (or not started: a tool, a test)
                return
            self._queue.append(row)
            try:
                self._journal.append(row)
            except OSError:  # a full disk: the row is still counted, and committed unless the process dies
                self.failed += 1
                if self.failed == 1 or self.failed % 10_000 == 0:
                    log.exception("could not journal a request's spend (%d so far)", self.failed)

    def spent(self, key: str, days: tuple[str, ...]) -> float:
        """What `key` has spent on `days` (UTC), committed by any process or recorded here."""
        with self._lock:
            committed, pending = self._committed.get(key), self._pending.get(key)
            total = sum(committed.get(day, 0.0) for day in days) if committed else 0.0
            return total + (sum(pending.get(day, 0.0) for day in days) if pending else 0.0)

    def _run(self) -> None:
        assert self._db is not None and self.path is not None
        writes, read_back = 0, time.monotonic()
        while True:
            self._wake.wait(FLUSH_S)
            with self._lock:  # the rows and the journal that holds exactly them, swapped for empty ones
                rows, self._queue = self._queue, []
                journal = self._journal
                if rows and not self._stop:
                    self._journal = Journal(self.path)
            if rows:
                try:
                    with self._db:
                        _ROWS.insert(self._db, rows)
                    self.written += len(rows)
                except sqlite3.Error:  # a full disk: the journal keeps them for the next start
                    log.exception("could not write %d requests' spend to %s", len(rows), self.path)
                    if journal is not None and journal is not self._journal:
                        journal.close()
                else:
                    self._committed_here(rows)
                    writes += 1
                    if writes % 1000 == 1:
                        self._prune(time.time())
                    if journal is not None and journal is not self._journal:
                        journal.remove()
            if time.monotonic() - read_back >= REFRESH_S:  # the spend of other processes sharing the file
                self._read_back()
                read_back = time.monotonic()
            if self._stop:
                with self._lock:
                    if not self._queue:
                        if self._journal is not None:
                            self._journal.remove()
                            self._journal = None
                        return

    def _replay_orphans(self, path: Path) -> None:
        """Rows killed processes journaled and never committed: committed now (each once)."""
        assert self._db is not None
        for orphan, rows in orphans(path):
            with self._db:
                _ROWS.insert(self._db, rows)
            self.replayed += len(rows)
            log.info("committed %d requests' spend that %s held", len(rows), orphan.name)

    def _committed_here(self, rows: list[tuple[Any, ...]]) -> None:
        """Rows this thread just committed: from pending to committed, in one step under the lock."""
        with self._lock:
            for row in rows:
                key, day, usd = row[_KEY], row[_DAY], row[_USD] or 0.0
                days = self._committed.setdefault(key, {})
                days[day] = days.get(day, 0.0) + usd
                pending = self._pending[key]
                pending[day] -= usd
                if abs(pending[day]) < 1e-12:
                    del pending[day]

    def _read_back(self) -> None:
        """The totals as the file has them (every process's commits), in place of this process's view of
        them: what this process has not committed yet stays pending, so nothing is missed or counted twice."""
        try:
            totals = self._read_totals()
        except sqlite3.Error:
            log.exception("could not read the spend totals back from %s", self.path)
            return
        with self._lock:
            self._committed = totals

    def _read_totals(self) -> Totals:
        """This month's and last month's totals (what a budget can ask about), from the file."""
        assert self._db is not None
        since = utc_day(time.time() - 32 * 86400)
        totals: Totals = {}
        for key, day, usd in self._db.execute("SELECT key, day, sum(usd) FROM days WHERE day >= ? "
                                              "GROUP BY key, day", (since,)):
            totals.setdefault(key, {})[day] = usd
        return totals

    def _prune(self, now: float) -> None:
        """Requests' rows past their age go; the days' totals stay."""
        assert self._db is not None
        with self._db:
            self._db.execute("DELETE FROM requests WHERE at < ?", (now - self.max_age_s,))

    def close(self) -> None:
        """Commit what is pending and stop (from a thread: it waits for the writer)."""
        self._stop = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        if self._db is not None:
            self._db.close()
