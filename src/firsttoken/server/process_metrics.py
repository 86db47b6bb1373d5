"""The gateway process itself for GET /metrics: memory, open file descriptors and CPU (prometheus_client's
process collector, Linux's /proc), the asyncio tasks alive, read when asked, and how late the event loop
ran what was due (alarms.LoopLag). A soak watches the first three stay flat; a leak of streams,
connections or tasks shows here first. A stall of the loop shows in the last, whoever caused it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from prometheus_client import ProcessCollector
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from firsttoken.alarms import LAG_BUCKETS_S, LoopLag


class TasksCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        try:
            alive = len(asyncio.all_tasks())  # scraped from a request handler: on the gateway's loop
        except RuntimeError:  # no loop running (a scrape from elsewhere): nothing to count
            return
        yield GaugeMetricFamily("firsttoken_asyncio_tasks", "asyncio tasks alive in this worker: the requests "
                                "being answered and the gateway's own.", value=alive)


class LoopLagCollector(Collector):
    def __init__(self, lag: LoopLag) -> None:
        self.lag = lag

    def collect(self) -> Iterator[Metric]:
        lag, running = self.lag, 0
        buckets = []
        for bound, count in zip((*map(str, LAG_BUCKETS_S), "+Inf"), lag.counts, strict=True):
            running += count
            buckets.append((bound, running))
        yield HistogramMetricFamily("firsttoken_event_loop_lag_seconds", "How late the event loop ran a timer "
                                    "that was due (its 50 ms ticker's, each tick): every request in the worker "
                                    "waits as long.", buckets=buckets, sum_value=lag.sum)
        yield GaugeMetricFamily("firsttoken_event_loop_lag_worst_seconds", "The longest the event loop has been "
                                "late since the worker started.", value=lag.worst)


def register_process_metrics(registry: CollectorRegistry, lag: LoopLag) -> None:
    ProcessCollector(registry=registry)
    registry.register(TasksCollector())
    registry.register(LoopLagCollector(lag))
