"""Where finished journeys go: attributed, written to the log and counted in the metrics, on a thread
of the sink's own, so the event loop pays one deque append per request.

The hand-off is bounded: if the thread falls behind by `capacity` journeys (a disk that stalls), the
oldest unwritten ones are dropped and counted rather than letting memory grow.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from time import perf_counter

from firsttoken.journey.attribution import attribute
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
        self._pending: deque[tuple[Timeline, float]] = deque()
        self._capacity = capacity
        self.dropped = 0
        self.written = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="journey-sink", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, timeline: Timeline) -> None:
        """A finished request (from the event loop; deque appends are thread-safe)."""
        if len(self._pending) >= self._capacity:
            self._pending.popleft()
            self.dropped += 1
        # The wall-clock arrival, from the monotonic one: one clock read here, none on the request's path.
        self._pending.append((timeline, time.time() - (perf_counter() - timeline.received)))

    def close(self) -> None:
        """Write what is pending and stop (from the event loop's shutdown)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        if self.log is not None:
            self.log.close()

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL_S):
            self._drain()
        self._drain()

    def _drain(self) -> None:
        rows = []
        while self._pending:
            timeline, at = self._pending.popleft()
            try:
                journey = attribute(timeline)
                self.metrics.observe(journey)
                rows.append(row(journey, at))
            except Exception:  # one odd timeline must not stop the record of all the others
                log.exception("could not record journey %s", timeline.request_id)
        if rows and self.log is not None:
            try:
                self.log.write(rows)
                self.written += len(rows)
            except Exception:  # a full disk: say so, keep serving, keep the metrics
                log.exception("could not write %d journeys to %s", len(rows), self.log.path)
