"""The ledger's journal: rows a process journaled and never committed are committed by the next process to
open the ledger, once each even when a journal repeats committed rows; a journal a live process holds is
left alone; a clean close leaves no journal behind."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from firsttoken.spend.journal import Journal
from firsttoken.spend.ledger import SpendLedger, utc_day


def row(n: int, usd: float, key: str = "team") -> tuple:
    at = time.time()
    return (f"req_{n}", at, utc_day(at), key, "up/m", "chat", 10, 0, 0, 5, 0, 0, usd, None, 0, 0.0, None)


def totals(path: Path) -> tuple[int, float]:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT sum(requests), sum(usd) FROM days").fetchone()
    finally:
        db.close()


def test_orphaned_rows_are_committed_once_by_the_next_ledger(tmp_path: Path) -> None:
    path = tmp_path / "spend.db"
    ledger = SpendLedger(path)
    ledger.start()
    ledger.record(row(1, 0.5))
    ledger.close()  # committed
    assert totals(path) == (1, 0.5) and not list(tmp_path.glob("spend.db.journal-*"))
    dead = Journal(path)  # a process that journaled two rows (one already committed) and died
    dead.append(row(1, 0.5))
    dead.append(row(2, 0.25))
    live = Journal(path)  # a process that is still running
    live.append(row(3, 1.0))
    dead.close()  # its lock goes with it
    reopened = SpendLedger(path)
    assert reopened.replayed == 2 and totals(path) == (2, 0.75)  # request 1 counted once, 3 not yet
    assert reopened.spent("team", (utc_day(time.time()),)) == 0.75
    assert [p.name for p in tmp_path.glob("spend.db.journal-*")] == [live.path.name]
    live.close()
    assert SpendLedger(path).replayed == 1 and totals(path) == (3, 1.75)
