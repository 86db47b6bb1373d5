"""Spend, savings and tokens from the ledger's daily totals, grouped as asked (by key and model, or by one
of key, model, day), with where each budgeted key stands: the same data for `firsttoken spend` and for
GET /v1/spend."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from firsttoken.config import ClientKey
from firsttoken.spend.ledger import utc_day

GROUPINGS = {"key": ("key",), "model": ("route",), "day": ("day",), "key,model": ("key", "route")}
_SUMS = ("requests", "unpriced", "estimated", "input_tokens", "cached_input_tokens", "cache_write_tokens",
         "output_tokens", "reasoning_tokens", "usd", "cache_hits", "joined", "sized", "saved_tokens", "saved_usd",
         "saved_s")


def spend_report(path: str | Path, since: float, by: str = "key,model", key: str | None = None,
                 budgets: list[ClientKey] | None = None, now: float | None = None) -> dict[str, Any]:
    """The report as JSON-ready data. `since` is a unix time; the ledger keeps totals by UTC day, so the
    report starts at the beginning of that day."""
    columns = GROUPINGS[by]
    now = time.time() if now is None else now
    first_day = utc_day(since)
    where, args = "day >= ?", [first_day]
    if key is not None:
        where, args = where + " AND key = ?", [*args, key]
    db = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True, timeout=10)
    try:
        grouped = db.execute(f"SELECT {', '.join(columns)}, {', '.join(f'sum({c})' for c in _SUMS)} FROM days "
                             f"WHERE {where} GROUP BY {', '.join(columns)} ORDER BY sum(usd) DESC, "
                             f"{', '.join(columns)}", args).fetchall()
        totals = db.execute(f"SELECT {', '.join(f'coalesce(sum({c}), 0)' for c in _SUMS)} FROM days WHERE {where}",
                            args).fetchone()
        standing = [_budget(db, k, now, first_day) for k in budgets or () if k.budget is not None
                    and (key is None or k.name == key)]
    finally:
        db.close()
    rows = [{**{("model" if c == "route" else c): value for c, value in zip(columns, row, strict=False)},
             **_sums(row[len(columns):])} for row in grouped]
    return {"since": first_day, "until": utc_day(now), "by": by, "key": key, "rows": rows, "total": _sums(totals),
            "budgets": standing}


def _sums(values: tuple[Any, ...]) -> dict[str, Any]:
    s = dict(zip(_SUMS, values, strict=True))
    return {"requests": s["requests"], "usd": s["usd"], "unpriced_requests": s["unpriced"],
            "estimated_requests": s["estimated"],
            "tokens": {"input": s["input_tokens"], "cached_input": s["cached_input_tokens"],
                       "cache_write": s["cache_write_tokens"], "output": s["output_tokens"],
                       "reasoning": s["reasoning_tokens"]},
            "saved": {"usd": s["saved_usd"], "tokens": s["saved_tokens"], "seconds": s["saved_s"],
                      "cache_hits": s["cache_hits"], "joined": s["joined"], "sized": s["sized"]}}


def _budget(db: sqlite3.Connection, key: ClientKey, now: float, first_day: str) -> dict[str, Any]:
    """Where a budgeted key stands today and this month, and its dearest day in the report's window."""
    assert key.budget is not None
    today, month = utc_day(now), utc_day(now)[:8] + "01"

    def spent(where: str, *args: str) -> float:
        return float(db.execute(f"SELECT coalesce(sum(usd), 0) FROM days WHERE key = ? AND {where}",
                                (key.name, *args)).fetchone()[0])

    dearest = db.execute("SELECT day, sum(usd) FROM days WHERE key = ? AND day >= ? GROUP BY day ORDER BY "
                         "sum(usd) DESC LIMIT 1", (key.name, first_day)).fetchone()
    budget = key.budget
    return {"key": key.name, "usd_per_day": budget.usd_per_day, "usd_per_month": budget.usd_per_month,
            "today": spent("day = ?", today), "this_month": spent("day >= ?", month),
            "dearest_day": {"day": dearest[0], "usd": dearest[1]} if dearest else None,
            "past_budget": bool(dearest and budget.usd_per_day is not None and dearest[1] > budget.usd_per_day)
            or (budget.usd_per_month is not None and spent("day >= ?", month) > budget.usd_per_month)}
