"""A trace as machines read it (`--json`, the keys docs/contracts.md names) and as people read it: a waterfall
of each run, where every millisecond went, next to the floor the speed of light sets."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from firsttoken.journey.attribution import Journey, attribute
from firsttoken.journey.summary import percentile
from firsttoken.trace.probe import Run
from firsttoken.trace.tracer import Trace

NOTE_WIDTH = 30  # the widest note


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def run_facts(run: Run, journey: Journey | None = None) -> dict[str, Any]:
    """One run in the trace JSON contract (docs/contracts.md), and what else the X-ray knows of it."""
    journey = journey or attribute(run.timeline)
    t, p, h = run.timeline, journey.phases, run.timeline.handshake
    return {
        "request_id": t.request_id or None,  # the endpoint's x-request-id: a firsttoken gateway's journey id
        "connection": "warm" if t.reused else "cold",
        "status": t.status,
        "error": run.error,
        "dns_ms": _ms(h.dns_ms) if h else 0.0,
        "connect_ms": _ms(h.tcp_ms) if h else 0.0,  # the TCP handshake; the vocabulary's connect is handshakes_ms
        "tls_ms": _ms(h.tls_ms) if h else 0.0,
        "handshakes_ms": _ms(p.connect),
        "ttfb_ms": _ms(p.ttfb),
        "ttft_ms": _ms(p.ttft),
        "itl_ms_p50": _ms(percentile(run.gaps_ms, 50)),
        "itl_ms_p95": _ms(percentile(run.gaps_ms, 95)),
        "e2e_ms": _ms(p.e2e),
        "decode_ms": _ms(p.decode),
        "rtt_ms": _ms(p.rtt),
        "queue_prefill_ms": _ms(p.queue_prefill),
        "distance_tax_ms": _ms(p.distance_tax),
        "output_tokens": t.output_tokens if t.output_tokens is not None else t.token_events,
        "input_tokens": t.input_tokens,
        "tokens_per_s": _ms(journey.tokens_per_s),
        "connection_reused": t.reused,
        "floor_ms": _ms(p.floor),
        "endpoint_timing": run.declared,
        "cache": journey.cache,  # a firsttoken gateway's x-firsttoken-cache (bypass from any other endpoint)
        "verdict": run.error or journey.verdict,
    }


def trace_facts(trace: Trace) -> dict[str, Any]:
    return {"url": trace.target.base, "api": trace.target.api, "model": trace.model,
            "from": str(trace.origin) if trace.origin else None,
            "region": str(trace.target.region) if trace.target.region else None,
            "floor_ms": _ms(trace.floor_ms), "runs": [run_facts(r) for r in trace.runs]}


def render(trace: Trace, console: Console) -> None:
    console.print(Text.assemble(("firsttoken trace ", "bold"), trace.target.chat_url, "  ",
                                (f"{trace.model} · {trace.target.api} API", "dim")))
    facts = [run_facts(r) for r in trace.runs]
    for index, fact in enumerate(facts):
        title = f"run {index + 1}: {fact['connection']} connection"
        console.print()
        bar_width = max(12, min(60, console.width - 15 - 9 - NOTE_WIDTH - 4))
        console.print(Group(Text(title, style="bold"), _waterfall(fact, bar_width), _verdict(fact)))
    console.print()
    console.print(_distance(trace, facts))
    if len(facts) > 1 and facts[0]["connection"] == "cold" and not facts[0]["error"]:
        warm = [f for f in facts[1:] if f["connection"] == "warm" and not f["error"]]
        if warm and facts[0]["handshakes_ms"] >= 1.0:
            saved = facts[0]["ttft_ms"] - min(f["ttft_ms"] for f in warm)
            console.print(f"A warm connection saved {facts[0]['handshakes_ms']:.0f} ms of handshakes (the first "
                          f"token came {saved:.0f} ms sooner): what the gateway's warm pool saves every request.")


def _waterfall(fact: dict[str, Any], bar_width: int) -> Table:
    table = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False)
    table.add_column("phase", style="bold", no_wrap=True, min_width=15)
    table.add_column("ms", justify="right", no_wrap=True, min_width=8)
    table.add_column("bar", no_wrap=True, min_width=bar_width + 1)
    table.add_column("note", style="dim", overflow="fold")
    if fact["error"] and not fact["ttfb_ms"]:
        table.add_row("error", "", Text(fact["error"], style="red"), "")
        return table
    total = fact["e2e_ms"] or 1.0
    dns, tcp, tls = fact["dns_ms"] or 0.0, fact["connect_ms"] or 0.0, fact["tls_ms"] or 0.0
    start = dns + tcp + tls
    ttfb, rtt, queue = fact["ttfb_ms"] or 0.0, fact["rtt_ms"], fact["queue_prefill_ms"]
    rows: list[tuple[str, float | None, float, float, str, str]] = []  # name, ms, at, length, style, note
    if fact["connection"] == "cold":
        rows += [("dns", dns, 0.0, dns, "magenta", ""), ("tcp", tcp, dns, tcp, "blue", "1 round trip"),
                 ("tls", tls, dns + tcp, tls, "cyan", "TLS 1.3: 1 round trip" if tls else "plain HTTP")]
    else:
        rows.append(("handshakes", 0.0, 0.0, 0.0, "blue", "reused: none to pay"))
    rows.append(("ttfb", ttfb, start, ttfb, "yellow", "request sent → first byte"))
    if rtt is not None:
        rows.append(("  rtt", rtt, start, min(rtt, ttfb), "green", "the network, both ways"))
    if queue is not None:
        rows.append(("  queue+prefill", queue, start + (rtt or 0.0), queue, "red", "at the provider"))
    if fact["ttft_ms"] is not None:
        rows.append(("ttft", fact["ttft_ms"], 0.0, fact["ttft_ms"], "bright_white", "sent → first token"))
    if fact["decode_ms"] is not None:
        rate = f"{fact['output_tokens']} tokens" + (f" at {fact['tokens_per_s']:.0f} tok/s"
                                                    if fact["tokens_per_s"] else "")
        rows.append(("decode", fact["decode_ms"], fact["ttft_ms"] or 0.0, fact["decode_ms"], "bright_green", rate))
    if fact["itl_ms_p50"] is not None:
        rows.append(("itl p50 / p95", fact["itl_ms_p50"], 0.0, 0.0, "", f"p95 {fact['itl_ms_p95']:.1f} ms"))
    rows.append(("e2e", fact["e2e_ms"], 0.0, total, "white", "sent → last byte"))
    for name, value, at, length, style, note in rows:
        shown = f"{value:.1f}" if value is not None else "–"
        table.add_row(name, shown, _bar(at, length, total, style, bar_width), note)
    return table


def _bar(at: float, length: float, total: float, style: str, width: int) -> Text:
    scale = width / total
    begin = min(int(at * scale), width - 1)
    cells = max(1, round(length * scale)) if length > 0 else 0
    cells = min(cells, width - begin)
    return Text.assemble(" " * begin, ("█" * cells, style), " " * (width - begin - cells), ("│", "dim"))


def _verdict(fact: dict[str, Any]) -> Text:
    style = "red" if fact["error"] else "bold"
    return Text.assemble(("→ ", "dim"), (fact["verdict"], style))


def _distance(trace: Trace, facts: list[dict[str, Any]]) -> Text:
    rtts = [f["rtt_ms"] for f in facts if f["rtt_ms"] is not None]
    measured = f"measured round trip {min(rtts):.0f} ms" if rtts else "no round trip measured (not a TCP path)"
    floors = [f["floor_ms"] for f in facts if f["floor_ms"] is not None]
    if trace.floor_ms is not None:
        where, floor = f"{trace.origin} → {trace.target.region}: ", trace.floor_ms
    elif floors:  # a gateway in front told its floor from where it stands
        where, floor = "from the gateway to its upstream: ", floors[0]
    else:
        missing = [] if trace.origin else ["--from CITY (or `location` in firsttoken.yaml)"]
        missing += [] if trace.target.region else ["--region CODE (this endpoint's region is not known)"]
        return Text(f"{measured}; for the floor the speed of light sets, give {' and '.join(missing)}.")
    tax = f", distance tax {min(rtts) - floor:.0f} ms (route and congestion)" if rtts else ""
    return Text.assemble(("floor ", "bold"), where, (f"{floor:.0f} ms", "bold green"),
                         f" a round trip in fibre; {measured}{tax}.")
