"""The edge cache's own counters for GET /metrics, read when asked: answers it would not keep, by why,
stored answers it dropped because they could not be replayed, and what the embedding worker did (batches,
prompts, lookups skipped because it was too far behind)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from firsttoken.cache.edge import EdgeCache


class CacheCollector(Collector):
    def __init__(self, cache: EdgeCache) -> None:
        self.cache = cache

    def collect(self) -> Iterator[Metric]:
        not_kept = CounterMetricFamily("firsttoken_cache_not_kept", "Answers the edge cache did not keep, by why: "
                                       "incomplete or broken in their wire format, or marked no-store.",
                                       labels=["reason"])
        for reason, count in sorted(self.cache.not_kept.items()):
            not_kept.add_metric([reason], count)
        dropped = CounterMetricFamily("firsttoken_cache_dropped", "Stored answers dropped because they could "
                                      "not be replayed in the shape asked for (the request went upstream).")
        dropped.add_metric([], self.cache.dropped)
        yield from (not_kept, dropped)
        encoder = self.cache.encoder
        if encoder is not None:
            skipped = CounterMetricFamily("firsttoken_semantic_lookups_skipped", "Semantic lookups skipped because "
                                          "the embedding model was too far behind (the request went upstream).")
            skipped.add_metric([], encoder.skipped)
            batches = CounterMetricFamily("firsttoken_semantic_encoder_batches", "Model calls of the embedding "
                                          "worker; prompts embedded, over this, is the mean batch.")
            batches.add_metric([], encoder.batches)
            encoded = CounterMetricFamily("firsttoken_semantic_prompts_embedded", "Prompts embedded: for a "
                                          "lookup (on the request's path), or after an answer was kept.",
                                          labels=["when"])
            encoded.add_metric(["lookup"], encoder.for_lookups)
            encoded.add_metric(["after_answer"], encoder.encoded - encoder.for_lookups)
            dropped_later = CounterMetricFamily("firsttoken_semantic_prompts_not_embedded", "Kept answers whose "
                                                "prompts were not embedded (exact hits only): too many waited, or "
                                                "no lookup could wait for one that long.")
            dropped_later.add_metric([], encoder.dropped)
            yield from (skipped, batches, encoded, dropped_later)
