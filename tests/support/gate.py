"""A gate a test upstream's answers wait at, shut and opened by the test: a barrier, not a delay a busy
machine may outlast. The test shuts it, waits until the answers it expects are held (`waiting`), does what
it must while they are in flight (a request joins them, a request queues behind them), and opens it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from support.waiting import PATIENCE_S, POLL_S


class Gate:
    """Open unless a test shuts it; it opens itself after PATIENCE_S, so a failed test hangs nothing."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()
        self.waiting = 0  # answers held at it now

    @contextmanager
    def shut(self) -> Iterator[Gate]:
        """Shut for the block (or until `open`)."""
        self._open.clear()
        try:
            yield self
        finally:
            self._open.set()

    def open(self) -> None:
        self._open.set()

    async def passed(self) -> None:
        """Once the gate is open (it is shut from the test's thread, so polled from the server's loop)."""
        self.waiting += 1
        try:
            deadline = time.monotonic() + PATIENCE_S
            while not self._open.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(POLL_S)
        finally:
            self.waiting -= 1
