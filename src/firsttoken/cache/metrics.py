"""The edge cache's own counters for GET /metrics, read when asked: answers it would not keep, by why,
stored answers it dropped because they could not be replayed, what the embedding worker did (batches,
prompts, lookups skipped because it was too far behind), how the lookups that raced the upstream ended,
and the hits that were near copies or small edits."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
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
            cache = self.cache
            encoded = CounterMetricFamily("firsttoken_semantic_prompts_embedded", "Prompts embedded: a request's "
                                          "own, for its lookup; or a kept one, when a later lookup in its context "
                                          "needed it.", labels=["whose"])
            encoded.add_metric(["request"], encoder.encoded - cache.embedded_stored)
            encoded.add_metric(["kept"], cache.embedded_stored)
            waiting = GaugeMetricFamily("firsttoken_semantic_prompts_unembedded", "Kept prompts not embedded: "
                                        "nothing else has been asked in their context.")
            waiting.add_metric([], len(cache.unembedded))
            races = CounterMetricFamily("firsttoken_semantic_races", "Semantic lookups still running when their "
                                        "request left, by how they ended: won (the hit answered, the upstream "
                                        "request cancelled), lost (the upstream answered first), missed, "
                                        "over_budget.", labels=["ended"])
            for ended in ("won", "lost", "missed", "over_budget"):
                races.add_metric([ended], cache.raced[ended])
            near = CounterMetricFamily("firsttoken_semantic_near_copies", "Semantic hits that were near copies: the "
                                       "same words but for a greeting, a courtesy or closing punctuation, found "
                                       "without an embedding.")
            near.add_metric([], cache.near_hits)
            edits = CounterMetricFamily("firsttoken_semantic_small_edits", "Semantic hits that were small edits of a "
                                        "kept long prompt, judged by what changed (cache/small_edits.py).")
            edits.add_metric([], cache.edit_hits)
            yield from (skipped, batches, encoded, waiting, races, near, edits)
