"""Many rows into a SQLite table from a thread that shares the GIL with the event loop.

Rows go in as multi-row INSERTs of 2**k rows each (at most 256: with the journey log's 36 columns, 9 216
parameters, under SQLite's 32 766): sqlite3 lets go of the GIL once per statement, and executemany's once
per row made the event loop and the writing thread trade the GIL (and, on one core, the CPU) a thousand
times a batch, at several times SQLite's own cost per row (measured in docs/benchmarks.md).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from itertools import chain
from typing import Any

_CHUNKS = (256, 128, 64, 32, 16, 8, 4, 2, 1)


class RowInserter:
    def __init__(self, table: str, columns: Sequence[str], verb: str = "INSERT") -> None:
        one_row = f"({', '.join('?' * len(columns))})"
        self._statements = {n: f"{verb} INTO {table} ({', '.join(columns)}) VALUES {', '.join([one_row] * n)}"
                            for n in _CHUNKS}

    def insert(self, db: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        """Within the caller's transaction."""
        start = 0
        for size in _CHUNKS:
            while len(rows) - start >= size:
                db.execute(self._statements[size], list(chain.from_iterable(rows[start:start + size])))
                start += size
