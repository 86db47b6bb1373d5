"""What `firsttoken journeys` prints: the journey log summarised per upstream, in tables that fit 80 columns
(milliseconds in the titles, not in every cell; nothing cut to an ellipsis)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table


def print_summary(summary: dict[str, dict[str, Any]], unknown: dict[str, int], log_path: str,
                  out: Console) -> None:
    if not summary and not unknown:
        out.print(f"No journeys in {log_path} for that selection.", markup=False)
        return
    out.print(f"Journeys in {log_path}", style="bold", markup=False)
    if summary:
        requests = _table("Requests", ("requests", "errors", "retried", "hedge wins", "tok/s p50"))
        for name, e in summary.items():
            rate = e["tokens_per_s"]["p50"]
            requests.add_row(name, str(e["requests"]), str(e["errors"]), str(e["retried"]), str(e["hedge_wins"]),
                             "—" if rate is None else f"{rate:.0f}")
        latency = _table("Latency, ms", ("ttft p50", "ttft p95", "e2e p50", "e2e p95"))
        for name, e in summary.items():
            latency.add_row(name, _ms(e, "ttft"), _ms(e, "ttft", "p95"), _ms(e, "e2e"), _ms(e, "e2e", "p95"))
        phases = ("client rtt", "gateway", "connect", "rtt", "floor", "queue+prefill", "decode")
        went = _table("Where the time went, ms (medians)", phases)
        for name, e in summary.items():
            went.add_row(name, *(_ms(e, phase) for phase in phases))
        for table in (requests, latency, went):
            out.print()
            out.print(table)
    if unknown:
        asked = ", ".join(f"{model} ×{count}" if count > 1 else model for model, count in unknown.items())
        count = sum(unknown.values())
        out.print()
        out.print(f"Asked for models that nothing serves ({count} request{'s' if count > 1 else ''}, 404): {asked}",
                  markup=False)


def _table(title: str, columns: tuple[str, ...]) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False, padding=(0, 1), collapse_padding=True)
    table.add_column("upstream", no_wrap=True)
    for column in columns:
        table.add_column(column, justify="right", no_wrap=True)
    return table


def _ms(entry: dict[str, Any], phase: str, q: str = "p50") -> str:
    value = entry[phase][q]
    return "—" if value is None else f"{value:.0f}" if value >= 10 else f"{value:.1f}"
