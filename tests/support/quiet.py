"""Tests that time the machine itself (a delay line's precision) run with no other test beside them.

The suite runs in two processes (pytest-xdist) on a two-core machine: a test that measures whether a
forwarder adds under a millisecond cannot share the cores with a gateway under load in the other process.
A module marked `quiet` takes the machine whole, between the other process's tests: each test holds a
shared lock while it runs, a quiet module an exclusive one for as long as it runs. A turnstile in front
gives the quiet module its turn: the other process, busy with short tests, would otherwise always hold the
shared lock again first.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _lock_dir() -> Path | None:
    """A folder every process of this run shares; None when the tests run in one process."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    return Path(tempfile.gettempdir()) / f"firsttoken-tests-{run}" if run else None


@contextmanager
def machine_share(quiet: bool) -> Iterator[None]:
    """Hold the machine: alone (quiet) or alongside the other process's ordinary tests."""
    folder = _lock_dir()
    if folder is None:
        yield
        return
    folder.mkdir(exist_ok=True)
    with open(folder / "turnstile", "a+b") as turnstile, open(folder / "machine", "a+b") as machine:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(machine, fcntl.LOCK_EX if quiet else fcntl.LOCK_SH)
        finally:
            if not quiet:  # a quiet test keeps the turnstile: nobody queues behind it meanwhile
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(machine, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
