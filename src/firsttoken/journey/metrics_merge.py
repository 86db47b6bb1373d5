"""Several workers' Prometheus expositions as one, for GET /metrics under `--workers N`.

The rules are prometheus_client's own in its multiprocess mode: counters, histograms and summaries are
added up across the workers (a scrape counts every request, whichever worker served it); a gauge is one
process's state (its memory, its open connections, a router's estimate), so each worker's value is kept,
labelled with its `worker` slot. A counter's `_created` is the earliest worker's.

The workers' instruments are written for speed (journey/instruments.py), not as prometheus_client
metrics, so its multiprocess mode cannot collect them: each worker renders its own exposition and this
merges the text, parsed by prometheus_client's parser.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

_ADDED = {"counter", "histogram", "summary", "gaugehistogram"}

_Key = tuple[str, tuple[tuple[str, str], ...]]


def merge_expositions(by_worker: Mapping[int, str]) -> bytes:
    """One exposition of every worker's metrics, from each worker's (by slot)."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[_Key, float]] = {}
    for worker, text in sorted(by_worker.items()):
        for family in text_string_to_metric_families(text):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                values[family.name] = {}
            samples = values[family.name]
            added = family.type in _ADDED
            for sample in family.samples:
                labels = sample.labels if added else {**sample.labels, "worker": str(worker)}
                key = (sample.name, tuple(labels.items()))
                if key not in samples:
                    samples[key] = sample.value
                elif sample.name.endswith("_created"):
                    samples[key] = min(samples[key], sample.value)
                else:
                    samples[key] += sample.value
    for name, merged in families.items():
        for (sample_name, label_pairs), value in values[name].items():
            merged.add_sample(sample_name, dict(label_pairs), value)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(list(families.values())))  # type: ignore[arg-type]
    return generate_latest(registry)


class _Fixed:
    """A collector of metrics already made."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self.metrics)
