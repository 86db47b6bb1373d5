"""The gateway process itself for GET /metrics: memory, open file descriptors and CPU (prometheus_client's
process collector, Linux's /proc), and the asyncio tasks alive, read when asked. A soak watches these three
stay flat; a leak of streams, connections or tasks shows here first."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from prometheus_client import ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry


class TasksCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        try:
            alive = len(asyncio.all_tasks())  # scraped from a request handler: on the gateway's loop
        except RuntimeError:  # no loop running (a scrape from elsewhere): nothing to count
            return
        yield GaugeMetricFamily("firsttoken_asyncio_tasks", "asyncio tasks alive in this worker: the requests "
                                "being answered and the gateway's own.", value=alive)


def register_process_metrics(registry: CollectorRegistry) -> None:
    ProcessCollector(registry=registry)
    registry.register(TasksCollector())
