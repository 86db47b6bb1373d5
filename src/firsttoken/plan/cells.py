"""How an option's summary reads in a table, the same in the terminal and in the HTML report."""

from __future__ import annotations

from firsttoken.plan.summary import OptionSummary

# After the option's name.
COLUMNS = ("where", "TTFT p50", "TTFT p95", "E2E p50", "E2E p95", "per token", "GPU busy", "cache hits",
           "cold starts", "$ / month", "$ / M tokens")


def duration(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.0f} ms"


def cells(s: OptionSummary) -> list[str]:
    """The option's row under COLUMNS."""
    return [s.where, duration(s.ttft.p50), duration(s.ttft.p95), duration(s.e2e.p50), duration(s.e2e.p95),
            f"{s.tpot_ms:.1f} ms", "—" if s.gpu_utilisation is None else f"{s.gpu_utilisation:.0%}",
            f"{s.cache_hits / max(s.requests, 1):.0%}", str(s.cold_starts), f"{s.usd_per_month:,.0f}",
            f"{s.usd_per_million_tokens:.2f}"]
