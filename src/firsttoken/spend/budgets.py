"""Budgets on client keys: USD per UTC day and per UTC month. A request is let in only when the most it may
cost fits in what is left: its prompt (as estimated) and its longest answer (max_tokens) at its first
target's price, beside what the key has spent and what its requests in flight in this process may still
spend (held until they end). Otherwise it is refused (429, `budget_exceeded`, with when the budget resets
and how much is left), so that a key stays within its budget unless the upstream counts more tokens than
the estimate; a request without max_tokens is held to its prompt alone. Every answer to a key with a
budget says where it stands (`x-firsttoken-budget`), and past `warn_at` of a budget, warns
(`x-firsttoken-budget-warning`).

Replicas share budgets through Redis (spend/shared.py): then the spend and the holds are Redis's, every
replica's together; without it (or while it is down) they are this process's ledger totals (every
process's that shares its file) and its own holds."""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass

from firsttoken.config import ClientKey
from firsttoken.errors import GatewayError
from firsttoken.server.http import Headers
from firsttoken.spend.ledger import SpendLedger, utc_day
from firsttoken.spend.shared import SharedSpend


@dataclass(frozen=True, slots=True)
class Period:
    name: str  # "day" or "month"
    limit: float  # USD
    days: tuple[str, ...]  # the UTC days it covers so far
    resets: float  # unix time its next period begins

    @property
    def shared_name(self) -> str:
        """Its total's name in Redis: day:YYYY-MM-DD or month:YYYY-MM."""
        return f"day:{self.days[0]}" if self.name == "day" else f"month:{self.days[0][:7]}"

    def describe_reset(self, now: float) -> str:
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.resets))
        return f"{at} (in {_duration(self.resets - now)})"


class Budgets:
    def __init__(self, keys: list[ClientKey], ledger: SpendLedger, warn_at: float = 0.8,
                 shared: SharedSpend | None = None) -> None:
        self._limits = {k.name: (k.budget.usd_per_day, k.budget.usd_per_month) for k in keys if k.budget is not None}
        self.ledger = ledger
        self.warn_at = warn_at
        self.shared = shared
        self._held: dict[str, float] = {}  # key → the most its requests in flight here may still cost

    def __bool__(self) -> bool:
        return bool(self._limits)

    def has(self, key: str) -> bool:
        return key in self._limits

    async def admit(self, key: str, most_usd: float, now: float, request_id: str) -> Headers:
        """Hold `most_usd` for a request of `key` (`settle` lets it go once the request's cost is counted)
        and return the headers that say where the key stands; raise the 429 when it would not fit."""
        limits = self._limits.get(key)
        if limits is None:
            return []
        periods = _periods(limits, now)
        held = self._held.get(key, 0.0)
        found = None
        if self.shared is not None:
            found = await self.shared.take(key, [(p.shared_name, p.limit) for p in periods], most_usd, request_id)
        if found is not None:
            refused, held, spent = found
        else:  # this process's count
            spent = [self.ledger.spent(key, period.days) for period in periods]
            refused = next((i + 1 for i, (period, total) in enumerate(zip(periods, spent, strict=True))
                            if total + held + most_usd > period.limit), 0)
        if refused:
            raise _exceeded(key, periods[refused - 1], spent[refused - 1], held, most_usd, now)
        self._held[key] = self._held.get(key, 0.0) + most_usd
        standing = [f"{period.name}={total:.6f}/{period.limit:g}" for period, total in zip(periods, spent, strict=True)]
        warnings = [f"{total / period.limit:.0%} of the {period.name}'s budget of ${period.limit:g} is spent; it "
                    f"resets at {period.describe_reset(now)}"
                    for period, total in zip(periods, spent, strict=True) if total >= self.warn_at * period.limit]
        headers = [(b"x-firsttoken-budget", "; ".join(standing).encode())]
        if warnings:
            headers.append((b"x-firsttoken-budget-warning", "; ".join(warnings).encode()))
        return headers

    async def settle(self, key: str, request_id: str, held: float, usd: float, day: str) -> None:
        """A request of a budgeted key has been costed (and its row handed to the ledger): its hold goes, and
        with Redis, its cost joins the shared totals."""
        if key not in self._limits:
            return
        left = self._held.get(key, 0.0) - held
        if left > 1e-12:
            self._held[key] = left
        else:
            self._held.pop(key, None)
        if self.shared is not None:
            await self.shared.settle(key, request_id, held, usd, day)


def _periods(limits: tuple[float | None, float | None], now: float) -> list[Period]:
    per_day, per_month = limits
    today = time.gmtime(now)
    periods = []
    if per_day is not None:
        midnight = calendar.timegm((today.tm_year, today.tm_mon, today.tm_mday, 0, 0, 0))
        periods.append(Period("day", per_day, (utc_day(now),), midnight + 86400))
    if per_month is not None:
        year, month = (today.tm_year + 1, 1) if today.tm_mon == 12 else (today.tm_year, today.tm_mon + 1)
        days = tuple(f"{today.tm_year:04d}-{today.tm_mon:02d}-{d:02d}" for d in range(1, today.tm_mday + 1))
        periods.append(Period("month", per_month, days, calendar.timegm((year, month, 1, 0, 0, 0))))
    return periods


def _exceeded(key: str, period: Period, spent: float, held: float, most: float, now: float) -> GatewayError:
    wait = max(int(period.resets - now) + 1, 1)
    left = max(period.limit - spent - held, 0.0)
    why = (f"this request may cost up to ${most:.4f} (its prompt and max_tokens), and ${left:.4f} is left"
           if most > 0 and spent + held < period.limit else f"it has spent ${spent:.4f}")
    return GatewayError(429, f"The client key {key!r} is at its ${period.limit:g} budget for the {period.name}: "
                             f"{why}{f' with ${held:.4f} held by its requests in flight' if held else ''}. The "
                             f"budget resets at {period.describe_reset(now)}.",
                        "insufficient_quota", code="budget_exceeded",
                        headers={"Retry-After": str(wait), "x-should-retry": "false",  # the SDKs would retry a 429
                                 "x-firsttoken-budget-resets": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                             time.gmtime(period.resets))})


def _duration(seconds: float) -> str:
    minutes = max(int(seconds // 60), 0)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min"
    return f"{hours // 24} d {hours % 24} h"
