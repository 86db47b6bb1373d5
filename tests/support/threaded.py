"""Run an async server (an async context manager) on its own event loop in a thread, so that
synchronous tests and SDK clients can talk to it while a gateway process sits in between."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, TypeVar

from support.waiting import PATIENCE_S

T = TypeVar("T")


class InThread(Generic[T]):
    def __init__(self, factory: Callable[[], AbstractAsyncContextManager[T]]) -> None:
        self._factory = factory
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self.value: T | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(),), daemon=True)

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        try:
            async with self._factory() as value:
                self.value = value
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:  # surfaced to the test by __enter__
            self._error = exc
            self._ready.set()

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run fn(*args) on the server's loop (to change its state between requests safely)."""
        self._loop.call_soon_threadsafe(fn, *args)

    def __enter__(self) -> T:
        self._thread.start()
        if not self._ready.wait(PATIENCE_S):  # a busy machine may take seconds to start a region
            raise RuntimeError(f"the server in a thread did not start in {PATIENCE_S:g} s")
        if self._error is not None:
            raise self._error
        assert self.value is not None
        return self.value

    def __exit__(self, *exc: object) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(PATIENCE_S)
