"""The upstream pools for GET /metrics, read when asked: each pool's connection limit, the requests
waiting for a free connection now, and how many ever had to (a connection limit is a queue once streams
are long)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from firsttoken.upstream.registry import Upstreams


class PoolCollector(Collector):
    def __init__(self, upstreams: Upstreams) -> None:
        self.upstreams = upstreams

    def collect(self) -> Iterator[Metric]:
        limit = GaugeMetricFamily("firsttoken_upstream_pool_limit", "The most connections open to an upstream at "
                                  "once (pool.max).", labels=["firsttoken_upstream"])
        waiting = GaugeMetricFamily("firsttoken_upstream_pool_waiting", "Requests waiting now for a free connection "
                                    "to an upstream: every one its pool may hold is busy.",
                                    labels=["firsttoken_upstream"])
        waited = CounterMetricFamily("firsttoken_upstream_pool_waited", "Requests that had to wait for a free "
                                     "connection to an upstream.", labels=["firsttoken_upstream"])
        for name, link in self.upstreams.links.items():
            limit.add_metric([name], link.settings.pool.max)
            connector = link.pool.connector
            waiting.add_metric([name], connector.waiting if connector is not None else 0)
            waited.add_metric([name], connector.waited if connector is not None else 0)
        yield from (limit, waiting, waited)
