"""Give freed memory back to the system now and then (glibc's malloc_trim).

Requests with large bodies and answers (an agent's 100k-token prompt, its echo) allocate and free
megabytes at a time from several threads. glibc keeps what was freed in its arenas for reuse, and under
such a mix it reuses little of it: in a soak with 500 KB prompts the gateway's resident memory grew by
about 0.7 MiB a second while the live Python heap stayed flat (tracemalloc), and one malloc_trim(0)
gave back up to 65 MiB. Trimming every few seconds keeps resident memory flat (docs/reliability.md,
"Soak"). The call runs off the event loop; on a C library without it (musl), nothing is done. Between
trims, request-sized blocks are reused from the arenas rather than mapped afresh (fix_allocator_thresholds).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
from collections.abc import Callable
from typing import Any

TRIM_EVERY_S = 10.0
MMAP_THRESHOLD = 32 * 1024 * 1024  # past a request body's default bound (16 MiB)
TRIM_THRESHOLD = 64 * 1024 * 1024
_M_TRIM_THRESHOLD = -1  # mallopt's parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3

log = logging.getLogger("firsttoken.server")


def _libc_function(name: str) -> Any:
    """The C library's function `name`; None when there is no such library or function (not glibc)."""
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    try:
        return getattr(ctypes.CDLL(library), name)
    except (OSError, AttributeError):
        return None


def _malloc_trim() -> Callable[[int], int] | None:
    trim = _libc_function("malloc_trim")
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def fix_allocator_thresholds() -> None:
    """Blocks under MMAP_THRESHOLD come from glibc's arenas, and what is freed there stays for the next
    request until a trim (every TRIM_EVERY_S) or until more than TRIM_THRESHOLD is free at the heap's top.

    A block mapped on its own costs a page fault per 4 KiB each time it is made: with the threshold at
    256 KiB, every megabyte a request read, parsed into, re-serialised or sent was mapped afresh, 0.6 ms a
    megabyte here, and a 1 MB agent turn spent 4.2 ms in the gateway (p50, cache off); carved from the
    arenas, 2.1 ms (bench/gateway_phase.py, docs/benchmarks.md). What it costs: the blocks freed between
    two trims stay resident; a 5-minute soak (bench/soak.py, 500 KB prompts and answers) peaked at 405 MiB
    rather than 366. Both thresholds are fixed, not left to glibc's own rule, which raises them to the size
    of any mapped block freed (ONNX Runtime frees blocks of megabytes) and would make them depend on what
    ran first."""
    mallopt = _libc_function("mallopt")
    if mallopt is not None:
        mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)


class MemoryTrimmer:
    def __init__(self, every_s: float = TRIM_EVERY_S) -> None:
        self.every_s = every_s
        self._trim = _malloc_trim()
        fix_allocator_thresholds()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._trim is not None:
            self._task = asyncio.create_task(self._run(), name="firsttoken-memory-trim")

    async def _run(self) -> None:
        assert self._trim is not None
        while True:
            await asyncio.sleep(self.every_s)
            try:
                await asyncio.to_thread(self._trim, 0)
            except Exception:  # a failed trim costs memory, never the gateway
                log.exception("malloc_trim failed")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
