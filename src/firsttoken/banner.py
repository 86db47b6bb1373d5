"""What `firsttoken serve` says once it holds its port: what runs, where its files are, how to try it.

A grid of (what, about it): at 80 columns a long line wraps under its own column instead of breaking into
the left margin, and file paths are absolute so that they can be found from anywhere.
"""

from __future__ import annotations

import os

from rich.console import Console
from rich.table import Table
from rich.text import Text

from firsttoken import __version__
from firsttoken.config import NOTHING_CONFIGURED, SIM_UPSTREAM, Settings


def banner(settings: Settings, workers: int, console: Console) -> None:
    listen = settings.listen
    base = f"{listen.scheme}://{listen.host}:{listen.port}/v1"
    console.print(Text.assemble((f"firsttoken {__version__}", "bold"), " listening on ", (base, "bold cyan")))
    grid = Table.grid(padding=(0, 2), pad_edge=False)
    grid.add_column(no_wrap=True, style="cyan")
    grid.add_column(overflow="fold")
    grid.add_row("  started", f"{workers} worker{'s' if workers > 1 else ''}; settings from {settings.source}")
    for name, upstream in settings.upstreams.items():
        region = f", GPUs in {upstream.region}" if upstream.region else ""
        grid.add_row(f"  upstream {name}", f"{upstream.api} at {upstream.public_url}{region}")
    simulated = settings.simulated
    if simulated is not None:
        where = "in this process" if workers == 1 else f"in a process of its own, shared by the {workers} workers"
        grid.add_row(f"  upstream {SIM_UPSTREAM}", f"a simulated region {where}: {simulated.describe()}")
    for alias, targets in settings.models.items():
        grid.add_row(f"  model {alias}", f"→ {', '.join(targets)}")
    if settings.keys:
        grid.add_row("  client keys", ", ".join(k.name for k in settings.keys))
    grid.add_row("  journeys", _journeys(settings, workers))
    grid.add_row("  cache", _cache(settings))
    console.print(grid)
    if simulated is not None and not settings.upstreams:
        console.print(NOTHING_CONFIGURED, markup=False, highlight=False)
        ask = (f"curl -N {base}/chat/completions -H 'content-type: application/json' -d '{{\"model\": "
               f"\"{simulated.models[0]}\", \"stream\": true, \"messages\": [{{\"role\": \"user\", \"content\": "
               f"\"hello\"}}]}}'")
        console.print("Try it (one line):", style="bold")
        console.print(ask, markup=False, highlight=False, soft_wrap=True)  # whole, to copy: the terminal wraps it


def _journeys(settings: Settings, workers: int) -> str:
    journeys = settings.journeys
    where = [f"log {os.path.abspath(journeys.log)}"] if journeys.log else []
    if journeys.otlp is not None:
        where.append(f"OTLP spans to {journeys.otlp.endpoint} as {journeys.otlp.service_name}")
    said = "; ".join(where) or "kept in memory only"
    if workers > 1:
        said += f"; /metrics, /v1/journeys and /v1/routing answer for all {workers} workers"
    return said


def _cache(settings: Settings) -> str:
    cache = settings.cache
    if not cache.enabled:
        return "off"
    from firsttoken.redis_guard import redacted  # the URL without its userinfo or query (a password)

    where = {"sqlite": os.path.abspath(cache.path), "memory": "memory",
             "redis": f"Redis at {redacted(cache.url or '')}"}[cache.backend]
    kinds = "exact and paraphrases" if cache.semantic else "exact"
    scope = "shared by all client keys" if cache.shared else "one per client key"
    semantic = f", similarity ≥ {cache.similarity} ({cache.embedding})" if cache.semantic else ""
    return f"{kinds}, in {where}; {scope}, TTL {_duration(cache.ttl)}{semantic}"


def _duration(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"
