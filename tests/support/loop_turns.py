"""What the rest of a worker does while a test's code runs: another task that counts the turns of the event
loop it gets. Code that never lets the loop run leaves it at none."""

from __future__ import annotations

import asyncio
from types import TracebackType


class LoopTurns:
    def __init__(self) -> None:
        self.turns = 0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopTurns:
        self._task = asyncio.ensure_future(self._spin())
        await asyncio.sleep(0)  # it has started
        self.turns = 0
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        assert self._task is not None
        self._task.cancel()

    async def _spin(self) -> None:
        while True:
            self.turns += 1
            await asyncio.sleep(0)
