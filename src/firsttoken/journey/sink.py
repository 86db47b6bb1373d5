"""Where finished journeys go: counted in the metrics, and written to the log by a thread of the sink's
own.

On the event loop, as a request ends: its phases (arithmetic), the metrics (a bisect each), the log's
row (a tuple). The thread only hands batches of rows to SQLite, whose work is C and releases the GIL;
Python work on a second thread would hold the GIL against the event loop (every system call the loop
makes lets the thread in, and getting it back can take the interpreter's 5 ms switch interval).

The hand-off is bounded: if the writer falls behind by `capacity` rows (a disk that stalls), the oldest
unwritten ones are dropped and counted rather than letting memory grow.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from time import perf_counter
from typing import Any

from firsttoken.journey.attribution import phases
from firsttoken.journey.log import JourneyLog, row
from firsttoken.journey.metrics import Metrics
from firsttoken.journey.timeline import Timeline

log = logging.getLogger("firsttoken.journeys")

FLUSH_INTERVAL_S = 0.25
DEFAULT_CAPACITY = 100_000


class JourneySink:
    def __init__(self, journey_log: JourneyLog | None, metrics: Metrics, capacity: int = DEFAULT_CAPACITY) -> None:
        self.log = journey_log
        self.metrics = metrics
        self._rows: deque[tuple[Any, ...]] = deque()
        self._capacity = capacity
        self.dropped = 0
        self.written = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="journey-log", daemon=True)

    def start(self) -> None:
        if self.log is not None:
            self._thread.start()

    def put(self, timeline: Timeline) -> None:
        """A finished request, from the event loop."""
        p = phases(timeline)[0]
        self.metrics.observe(timeline, p)
        if self.log is None:
            return
        if len(self._rows) >= self._capacity:
            self._rows.popleft()
            self.dropped += 1
        # The wall-clock arrival from the monotonic one (deque appends are thread-safe).
        self._rows.append(row(timeline, p, time.time() - (perf_counter() - timeline.received)))

    def close(self) -> None:
        """Write what is pending and stop (from the event loop's shutdown, through a thread)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        if self.log is not None:
            self._write()
            self.log.close()

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL_S):
            self._write()

    def _write(self) -> None:
        assert self.log is not None
        rows = []
        while self._rows:
            rows.append(self._rows.popleft())
        if not rows:
            return
        try:
            self.log.write(rows)
            self.written += len(rows)
        except Exception:  # a full disk: say so, keep serving, keep the metrics
            log.exception("could not write %d journeys to %s", len(rows), self.log.path)
