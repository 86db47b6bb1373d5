"""Where finished journeys go: counted in the metrics, and written to the log (and to an OTLP collector,
when configured) by a thread of the sink's own.

A request's end only appends its timeline to a list. Every BATCH_S the event loop turns the batch into
phases (arithmetic), metrics (a bisect each) and the log's rows (tuples), in one tight loop: the same
work done once per request between two requests' worth of other code ran at several times the cost
(measured in docs/benchmarks.md), because each time it started from cold caches. /metrics and shutdown
take the batch first, so nothing is seen late or lost.

The thread only hands batches of rows to SQLite, whose work is C and releases the GIL; Python work on a
second thread would hold the GIL against the event loop (every system call the loop makes lets the
thread in, and getting it back can take the interpreter's 5 ms switch interval). OTLP export is the
exception, and opt-in: the SDK's spans are Python objects, built on that thread.

The hand-offs are bounded: if the writer falls behind by `capacity` rows (a disk that stalls), the oldest
unwritten ones are dropped and counted rather than letting memory grow.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from time import perf_counter
from typing import Any

from firsttoken.journey.attribution import Phases, phases
from firsttoken.journey.feed import JourneyFeed
from firsttoken.journey.log import JourneyLog, row
from firsttoken.journey.metrics import Metrics
from firsttoken.journey.otlp import OtlpExporter
from firsttoken.journey.shared import SharedJourneys
from firsttoken.journey.timeline import Timeline

log = logging.getLogger("firsttoken.journeys")

BATCH_S = 0.1
FLUSH_INTERVAL_S = 0.5
DEFAULT_CAPACITY = 100_000


class JourneySink:
    def __init__(self, journey_log: JourneyLog | None, metrics: Metrics, spans: OtlpExporter | None = None,
                 capacity: int = DEFAULT_CAPACITY) -> None:
        self.log = journey_log
        self.metrics = metrics
        self.spans = spans
        self._rows: deque[tuple[Any, ...]] = deque()
        self._finished: deque[tuple[Timeline, Phases]] = deque()
        self._capacity = capacity
        self.dropped = 0
        self.written = 0
        self.exported = 0
        self._batch: list[Timeline] = []
        self.feed: JourneyFeed | None = None  # live watchers (the dashboard), when the gateway has any
        self.shared: SharedJourneys | None = None  # the replicas' journeys in Redis, when configured
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="journey-log", daemon=True)

    def start(self) -> None:
        """On the event loop: from now on, finished journeys are taken in batches on it."""
        self._loop = asyncio.get_running_loop()
        if self.log is not None or self.spans is not None:
            self._thread.start()

    def put(self, timeline: Timeline) -> None:
        """A finished request, from the event loop."""
        self._batch.append(timeline)
        if len(self._batch) == 1:
            if self._loop is None:  # not started (a tool or a test): at once
                self.take_batch()
            else:
                self._loop.call_later(BATCH_S, self.take_batch)

    def take_batch(self) -> None:
        """Phases, metrics and rows of the journeys that finished since the last batch (on the loop)."""
        batch, self._batch = self._batch, []
        now_wall, now = time.time(), perf_counter()
        observe, keep_rows, keep_spans = self.metrics.observe, self.log is not None, self.spans is not None
        feed = self.feed if self.feed is not None and self.feed.watched else None
        live: list[tuple[Timeline, Phases, float]] = []
        for timeline in batch:
            p = phases(timeline)[0]
            observe(timeline, p)
            if keep_rows:
                # The wall-clock arrival from the monotonic one (deque appends are thread-safe).
                self._hand_off(self._rows, row(timeline, p, now_wall - (now - timeline.received)))
            if keep_spans:
                self._hand_off(self._finished, (timeline, p))
            if feed is not None:
                live.append((timeline, p, now_wall - (now - timeline.received)))
        if feed is not None and live:
            feed.publish(live)
        if self.shared is not None and batch:
            self.shared.publish(batch, now_wall, now)

    def _hand_off(self, queue: deque[Any], item: Any) -> None:
        if len(queue) >= self._capacity:
            queue.popleft()
            self.dropped += 1
        queue.append(item)

    def close(self) -> None:
        """Write what is pending and stop (after take_batch on the event loop's shutdown, through a thread)."""
        self.take_batch()
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self._write()
        if self.log is not None:
            self.log.close()
        if self.spans is not None:
            self.spans.close()

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL_S):
            self._write()

    def _write(self) -> None:
        rows = _drain(self._rows)
        if rows and self.log is not None:
            try:
                self.log.write(rows)
                self.written += len(rows)
            except Exception:  # a full disk: say so, keep serving, keep the metrics
                log.exception("could not write %d journeys to %s", len(rows), self.log.path)
        for timeline, p in _drain(self._finished):
            assert self.spans is not None
            try:
                self.spans.export(timeline, p)  # queued in the SDK's batch; its own thread sends
                self.exported += 1
            except Exception:
                log.exception("could not export journey %s as a span", timeline.request_id)


def _drain(queue: deque[Any]) -> list[Any]:
    items = []
    while queue:
        items.append(queue.popleft())
    return items
