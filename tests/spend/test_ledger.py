"""The ledger's journal: rows a process journaled and never committed are committed by the next process to
open the ledger, once each even when a journal repeats committed rows; a journal a live process holds is
left alone; a clean close leaves no journal behind."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from firsttoken.spend.journal import Journal
from firsttoken.spend.ledger import SpendLedger, utc_day
from support.waiting import wait_until


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


def test_each_days_totals_are_the_sums_of_its_requests(tmp_path: Path) -> None:
    """Totals are summed a batch at a time: across batches, keys, days, routes, unpriced, estimated and saved
    requests, and a row repeated within a batch and across batches, they are what the rows add up to."""
    path = tmp_path / "spend.db"
    ledger = SpendLedger(path)
    ledger.start()
    yesterday = time.time() - 86400
    rows = []
    for n in range(40):
        at = yesterday if n % 5 == 0 else time.time()
        saved_by = (None, "cache", "joined", "sized")[n % 4]
        rows.append((f"req_{n}", at, utc_day(at), ("team", "ops")[n % 2], ("up/a", "up/b", "")[n % 3], "chat",
                     10 + n, n % 3, n % 2, 5 + n, n % 4, n % 7 == 0, None if n % 6 == 0 else 0.001 * n, saved_by,
                     n if saved_by else 0, 0.0005 * n if saved_by else 0.0, 0.1 * n if n % 8 else None))
    recorded = 0
    for batch in (rows[:15], rows[15:], rows[3:9]):  # the last: rows committed already, again
        for r in batch + batch[:2]:
            ledger.record(r)
        recorded += len(batch) + 2
        wait_until(lambda n=recorded: ledger.written == n, "the batch to be committed")  # before the next is recorded
    ledger.close()
    db = sqlite3.connect(path)
    try:
        summed = db.execute(
            "SELECT key, day, route, count(*), sum(usd IS NULL), sum(estimated), sum(input_tokens), "
            "sum(cached_input_tokens), sum(cache_write_tokens), sum(output_tokens), sum(reasoning_tokens), "
            "round(total(usd), 9), sum(saved_by IS 'cache'), sum(saved_by IS 'joined'), sum(saved_by IS 'sized'), "
            "sum(saved_tokens), round(sum(saved_usd), 9), round(total(saved_s), 9) "
            "FROM requests GROUP BY key, day, route ORDER BY key, day, route").fetchall()
        kept = db.execute("SELECT key, day, route, requests, unpriced, estimated, input_tokens, cached_input_tokens, "
                          "cache_write_tokens, output_tokens, reasoning_tokens, round(usd, 9), cache_hits, joined, "
                          "sized, saved_tokens, round(saved_usd, 9), round(saved_s, 9) "
                          "FROM days ORDER BY key, day, route").fetchall()
    finally:
        db.close()
    assert len(summed) == 12 and sum(r[3] for r in summed) == 40
    assert kept == summed
