"""The shipped price tables (prices/tables/*.csv): a GPU-hour by GPU and place, and a provider's price per
million tokens by model, each row with its source and date. The planner's options and the gateway's
upstreams take them unless their config states a price of its own. Prices move: the tables are a
starting point as of their dates, not a quote.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class GpuHour:
    gpu: str
    place: str  # a region code, as the scenario resolves it
    usd: float
    pricing: str  # on-demand, reserved, spot
    source: str
    date: str

    @property
    def cited(self) -> str:
        return f"{self.pricing}, {self.source}, {self.date}"


@dataclass(frozen=True)
class ApiPrice:
    provider: str
    model: str
    usd_per_million_input: float
    usd_per_million_output: float
    usd_per_million_cached_input: float | None  # a prompt prefix the provider's cache served; None: input's
    usd_per_million_cache_write: float | None  # a prompt prefix written to that cache (Anthropic); None: input's
    usd_per_million_cache_write_1h: float | None  # …to be kept an hour (Anthropic's 1-hour TTL); None: cache write's
    source: str
    date: str

    @property
    def cited(self) -> str:
        return f"{self.provider}, {self.source}, {self.date}"


def _rows(name: str) -> list[dict[str, str]]:
    with resources.files("firsttoken.prices").joinpath("tables", name).open(encoding="utf-8") as table:
        return list(csv.DictReader(table))


@functools.cache
def gpu_hours() -> tuple[GpuHour, ...]:
    return tuple(GpuHour(r["gpu"], r["place"], float(r["usd_per_gpu_hour"]), r["pricing"], r["source"], r["date"])
                 for r in _rows("gpu_hour.csv"))


@functools.cache
def api_prices() -> tuple[ApiPrice, ...]:
    return tuple(ApiPrice(r["provider"], r["model"], float(r["usd_per_million_input"]),
                          float(r["usd_per_million_output"]), _optional(r["usd_per_million_cached_input"]),
                          _optional(r["usd_per_million_cache_write"]), _optional(r["usd_per_million_cache_write_1h"]),
                          r["source"], r["date"])
                 for r in _rows("api_prices.csv"))


def _optional(cell: str) -> float | None:
    return float(cell) if cell else None


class NoPrice(LookupError):
    """No shipped price for what was asked; the message lists what the table has."""


def gpu_hour(gpu: str, place: str) -> GpuHour:
    """The table's on-demand price of one `gpu` an hour at `place` (a region code)."""
    for row in gpu_hours():
        if row.gpu == gpu and row.place == place and row.pricing == "on-demand":
            return row
    known = ", ".join(f"{r.gpu} at {r.place}" for r in gpu_hours()) or "nothing"
    raise NoPrice(f"no shipped GPU-hour price for {gpu} at {place} (the table has {known}): give usd_per_gpu_hour")


def api_price(model: str) -> ApiPrice:
    """The table's price of `model`'s tokens."""
    for row in api_prices():
        if row.model == model:
            return row
    known = ", ".join(r.model for r in api_prices())
    raise NoPrice(f"no shipped price for {model!r} (the table has {known}): give usd_per_million_input and "
                  "usd_per_million_output")
