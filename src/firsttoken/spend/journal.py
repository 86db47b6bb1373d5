"""The spend ledger's write-ahead journal: each finished request's row, appended to a file of this process's
own with one write() on the event loop, before the ledger's thread commits it to SQLite in a batch.

A write() that has returned is in the kernel's page cache: a SIGKILL right after it loses nothing (only
the machine's own crash can, as with SQLite's WAL at synchronous=NORMAL). So a request's spend is durable
the moment it ends, at a few microseconds, where a SQLite commit per request cost a quarter of the
gateway's throughput (docs/benchmarks.md, "Spend accounting"). Once a batch is committed, the journal that
held it is deleted; rows whose journal outlived its process are committed by the next process to open
the ledger (INSERT OR IGNORE by request id: a row committed and then replayed counts once).

Each process writes its own journals (`<ledger>.journal-<pid>-<n>`) and holds an exclusive flock on
them; the kernel lets go of it when the process dies, however it dies, and that is how a starting
process knows a journal is an orphan to replay rather than a live sibling's.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger("firsttoken.spend")


class Journal:
    """One journal file, open for appending, locked by this process."""

    _numbers = itertools.count(1)

    def __init__(self, ledger: Path) -> None:
        self.path = ledger.with_name(f"{ledger.name}.journal-{os.getpid()}-{next(self._numbers)}")
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new name: nobody else holds it

    def append(self, row: tuple[Any, ...]) -> None:
        os.write(self.fd, orjson.dumps(row) + b"\n")

    def close(self) -> None:
        """Kept, for the next process to open the ledger to commit: its rows could not be committed here."""
        os.close(self.fd)

    def remove(self) -> None:
        """Its rows are committed: the file goes (then the lock, with the descriptor)."""
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self.fd)


def orphans(ledger: Path) -> Iterator[tuple[Path, list[tuple[Any, ...]]]]:
    """Journals of processes that are gone, with their rows; each is locked while the caller commits its rows
    and deleted when the caller asks for the next one. A journal some live process holds is skipped."""
    for path in sorted(ledger.parent.glob(f"{ledger.name}.journal-*")):
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:  # another process replayed it meanwhile
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # its process is alive
                continue
            with open(fd, "rb", closefd=False) as journal:
                rows = [tuple(row) for row in map(_row, journal) if row is not None]
            yield path, rows
            path.unlink(missing_ok=True)
        finally:
            os.close(fd)


def _row(line: bytes) -> list[Any] | None:
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:  # a line cut by a full disk: the request is lost, the rest are not
        log.warning("skipping an unreadable line of a spend journal")
        return None
    return row if isinstance(row, list) else None
