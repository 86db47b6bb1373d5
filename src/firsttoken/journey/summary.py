"""Percentiles per upstream and where the time went, from the journey log: what `firsttoken journeys`
prints."""

from __future__ import annotations

import math
import re
import time
from collections import Counter, defaultdict
from datetime import datetime
from typing import Any

# The log's columns summarised, in the order a request meets them.
PHASES = ("client_rtt", "gateway", "connect", "ttfb", "rtt", "floor", "queue_prefill", "ttft", "decode", "e2e")
LABELS = {"queue_prefill": "queue+prefill", "client_rtt": "client rtt"}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: float | None = None) -> float:
    """"90s", "30m", "6h", "7d" before now, or an ISO date/time, as unix time."""
    now = time.time() if now is None else now
    if match := _DURATION.match(text):
        return now - float(match[1]) * _UNIT_S[match[2]]
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ValueError(f"--since {text!r}: give a duration such as 30m, 6h or 7d, or a date such as "
                         f"2026-12-01 or 2026-12-01T09:00") from None


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


EDGE_CACHE = "edge cache"  # journeys answered at the edge: no upstream saw them
NOT_ROUTED = "(not routed)"  # refused before any upstream was chosen (a limit, a bad request)
_FROM_CACHE = ("hit", "semantic-hit")  # "hit; joined" too: its first word
UNKNOWN_MODEL = "model_not_found"


def summarise(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per upstream: requests, errors, those that took more than one attempt (retried) and those a hedge won
    here, p50/p95 of each phase (ms) and of tokens/s. Requests for a model that nothing serves are no
    upstream's: they are counted apart (`unknown_models`), so a typo never shows up as a model."""
    by_upstream: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r.get("error_code") != UNKNOWN_MODEL:
            by_upstream[_where(r)].append(r)
    summary: dict[str, dict[str, Any]] = {}
    for upstream, group in sorted(by_upstream.items()):
        ok = [r for r in group if (r["status"] or 0) < 400 and not r.get("error_code")]
        entry: dict[str, Any] = {"requests": len(group), "errors": len(group) - len(ok),
                                 "retried": sum((r["attempts"] or 0) > 1 for r in group),
                                 "hedge_wins": sum((r.get("hedge") or "").startswith("hedge-of=") for r in group),
                                 "models": sorted({r["route"] or r["model"] for r in ok})}
        for phase in PHASES:
            values = [r[phase] for r in ok if r[phase] is not None]
            entry[LABELS.get(phase, phase)] = {"p50": percentile(values, 50), "p95": percentile(values, 95)}
        rates = [r["tokens_per_s"] for r in ok if r["tokens_per_s"]]
        entry["tokens_per_s"] = {"p50": percentile(rates, 50), "p95": percentile(rates, 95)}
        summary[upstream] = entry
    return summary


def unknown_models(rows: list[dict[str, Any]]) -> dict[str, int]:
    """The model names asked for that nothing serves, and how often: most often first."""
    counts = Counter(r["model"] or "(none)" for r in rows if r.get("error_code") == UNKNOWN_MODEL)
    return dict(counts.most_common())


def _where(row: dict[str, Any]) -> str:
    if row["upstream"]:
        return str(row["upstream"])
    outcome = (row.get("cache_outcome") or "").partition(";")[0]  # "semantic-hit; similarity=0.96" → semantic-hit
    return EDGE_CACHE if outcome in _FROM_CACHE else NOT_ROUTED
