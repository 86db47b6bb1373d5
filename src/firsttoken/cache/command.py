"""`firsttoken cache stats|purge`: what the edge cache holds, per tenant and model, and emptying it."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click
from rich.console import Console
from rich.table import Table

from firsttoken import config as config_module
from firsttoken.cache.edge import open_store
from firsttoken.cache.stores import Store
from firsttoken.config import ConfigError

err = Console(stderr=True, highlight=False)
T = TypeVar("T")


def _store(config_path: str | None) -> Store:
    try:
        settings = config_module.load(config_path)
    except ConfigError as exc:
        err.print(f"firsttoken cache: {exc}", markup=False, soft_wrap=True)
        sys.exit(2)
    cache = settings.cache
    if not cache.enabled:
        err.print("firsttoken cache: the cache is off in this config (cache: false or backend: none)",
                  markup=False, soft_wrap=True)
        sys.exit(2)
    if cache.backend == "memory":
        err.print("firsttoken cache: the memory backend lives in the gateway's process (it empties when the "
                  "gateway stops); there is nothing to open here", markup=False, soft_wrap=True)
        sys.exit(2)
    return open_store(cache)


async def _with(store: Store, work: Callable[[Store], Awaitable[T]]) -> T:
    try:
        return await work(store)
    finally:
        await store.close()


@click.group()
def cache() -> None:
    """The edge cache: what it holds, and emptying it."""


_CONFIG = click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
                       help="firsttoken.yaml whose cache to open (default: as `serve` finds its settings).")


@cache.command()
@_CONFIG
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def stats(config_path: str | None, as_json: bool) -> None:
    """Answers kept, per tenant and model."""
    rows = asyncio.run(_with(_store(config_path), lambda store: store.stats()))
    if as_json:
        click.echo(json.dumps({"entries": sum(r["entries"] for r in rows), "bytes": sum(r["bytes"] for r in rows),
                               "by": rows}, indent=2))
        return
    table = Table(title="Edge cache", title_justify="left")
    for column in ("tenant", "model", "answers", "bytes"):
        table.add_column(column, justify="left" if column in ("tenant", "model") else "right")
    for r in rows:
        table.add_row(str(r["tenant"]), str(r["model"]), f"{r['entries']:,}", f"{r['bytes']:,}")
    Console(highlight=False).print(table if rows else "The edge cache is empty.")


@cache.command()
@_CONFIG
@click.option("--tenant", default=None, help="Only this client key's answers (its name; * for shared ones).")
@click.option("--model", default=None, help="Only this model's (upstream/model, or the model's own name).")
def purge(config_path: str | None, tenant: str | None, model: str | None) -> None:
    """Drop answers: all of them, or a tenant's, or a model's."""
    dropped = asyncio.run(_with(_store(config_path), lambda store: store.purge(tenant, model)))
    click.echo(f"purged {dropped} answer{'s' if dropped != 1 else ''}")
