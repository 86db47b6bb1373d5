"""How an option's summary reads in tables, the same in the terminal and in the HTML report: what the users
feel, and what it costs (with where each price comes from, as numbered notes)."""

from __future__ import annotations

from firsttoken.plan.summary import OptionSummary

# After the option's name.
FELT_COLUMNS = ("where", "TTFT p50", "TTFT p95", "E2E p50", "E2E p95", "per token", "cache hits", "cold starts")
COST_COLUMNS = ("$ / month", "$ / M tokens", "GPU busy", "kWh / M tokens", "power $ / month", "prices")


def duration(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.0f} ms"


def felt_cells(s: OptionSummary) -> list[str]:
    """The option's row under FELT_COLUMNS."""
    return [s.where, duration(s.ttft.p50), duration(s.ttft.p95), duration(s.e2e.p50), duration(s.e2e.p95),
            f"{s.tpot_ms:.1f} ms", f"{s.cache_hits / max(s.requests, 1):.0%}", str(s.cold_starts)]


def price_notes(summaries: list[OptionSummary]) -> list[str]:
    """Each price source once, in the order the options cite them: note n is the list's (n-1)th."""
    return list(dict.fromkeys(s.price_source for s in summaries if s.price_source))


def cost_cells(s: OptionSummary, notes: list[str]) -> list[str]:
    """The option's row under COST_COLUMNS; `notes` from price_notes."""
    power = "—" if s.usd_power_per_month is None else f"{s.usd_power_per_month:,.0f}"
    if s.power_source and s.usd_power_per_month is not None:
        power += f" ({s.power_source})"
    return [f"{s.usd_per_month:,.0f}", f"{s.usd_per_million_tokens:.2f}",
            "—" if s.gpu_utilisation is None else f"{s.gpu_utilisation:.0%}",
            "—" if s.kwh_per_million_tokens is None else f"{s.kwh_per_million_tokens:.2f}", power,
            f"table [{notes.index(s.price_source) + 1}]" if s.price_source in notes else "the scenario's"]
