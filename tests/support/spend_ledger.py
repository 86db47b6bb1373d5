"""The spend tests' gateway settings (in front of the recorded-usage upstream), the rows its ledger committed, and
the cost a stream said."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from conftest import ADMIN_KEY, CLIENT_KEY
from support.waiting import wait_until


def recorded_gateway_settings(upstream_url: str, **more: Any) -> dict[str, Any]:
    """Three upstreams on the recorded upstream, one per wire format, each model under a dated name (as
    providers answer to them) that the shipped table prices by its undated row."""
    return {
        "cache": False,
        "upstreams": {name: {"url": upstream_url, "key": "upstream-key-123456", "pool": {"warm": 0}, **extra}
                      for name, extra in (("oai", {}), ("ant", {"api": "anthropic"}), ("resp", {"responses": True}))},
        "models": {"gpt-4o-mini": ["oai/gpt-4o-mini-2024-07-18"],
                   "claude-sonnet-4-5": ["ant/claude-sonnet-4-5-20250929"], "o4-mini": ["resp/o4-mini"]},
        "keys": [{"name": "app", "key": CLIENT_KEY}], "admin_key": ADMIN_KEY,
        **more,
    }


def ledger_rows(workdir: Path, where: str = "1", *args: Any, at_least: int = 1) -> list[dict[str, Any]]:
    """The ledger's rows, once its writer has committed `at_least` of them (a few milliseconds; an
    AssertionError if they never come). `at_least=0`: what it has committed now."""
    db = sqlite3.connect(workdir / "firsttoken-spend.db")
    db.row_factory = sqlite3.Row
    try:
        def committed() -> list[dict[str, Any]] | None:
            rows = [dict(r) for r in db.execute(f"SELECT * FROM requests WHERE {where} ORDER BY at", args)]
            return rows if len(rows) >= at_least else None

        found = committed() if at_least == 0 else None  # an empty list is an answer, not a wait
        return found if found is not None else wait_until(committed, f"{at_least} ledger rows where {where}")
    finally:
        db.close()


def closing_cost(lines: list[str]) -> str:
    """A stream's x-firsttoken-cost: what its closing comment says."""
    found = [line for line in lines if line.startswith(": x-firsttoken-cost ")]
    assert len(found) == 1, lines[-6:]
    return found[0].removeprefix(": x-firsttoken-cost ")
