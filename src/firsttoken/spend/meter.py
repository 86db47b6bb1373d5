"""The spend side of a request's end: its cost worked out once (spend/cost.py), the route's speed learned
from it, and its row handed to the ledger. Built once per gateway, with the prices its config and the
simulated region give (`pricing_for`)."""

from __future__ import annotations

import time
from time import perf_counter

from firsttoken.config import Settings
from firsttoken.journey.timeline import Timeline
from firsttoken.prices.shipped import NoPrice, gpu_hour
from firsttoken.spend.budgets import Budgets
from firsttoken.spend.cost import GpuRate, Pricing, Rate, TokenRate
from firsttoken.spend.ledger import SpendLedger, utc_day
from firsttoken.spend.usage import Tokens

_NONE = Tokens()


class SpendMeter:
    def __init__(self, pricing: Pricing, ledger: SpendLedger, budgets: Budgets) -> None:
        self.pricing = pricing
        self.ledger = ledger
        self.budgets = budgets

    def record(self, timeline: Timeline) -> bool:
        """A finished request (on the event loop): costed, and counted to its key. True when its key's budget
        is owed a `settle` (an await only those requests pay for)."""
        if timeline.pricing is None:  # not a generation (count_tokens, the operator's routes)
            return False
        cost = timeline.costed()
        self.pricing.speeds.observe(timeline)
        if timeline.sent or timeline.cache.from_cache:  # not refused, nor failed before reaching an upstream
            at = _arrived(timeline)
            tokens = cost.tokens or _NONE
            self.ledger.record((timeline.request_id, at, utc_day(at), timeline.tenant, timeline.route, timeline.api,
                                tokens.input, tokens.cached_input, tokens.cache_write, tokens.output,
                                tokens.reasoning, int(cost.estimated), cost.usd, cost.saved_by or None,
                                cost.saved_tokens, cost.saved_usd, cost.saved_s))
        return bool(timeline.budget_hold or (cost.usd and self.budgets.has(timeline.tenant)))

    async def settle(self, timeline: Timeline) -> None:
        """What the request held of its key's budget let go, and what it cost counted (Redis's, when shared)."""
        assert timeline.cost is not None, "recorded first"
        await self.budgets.settle(timeline.tenant, timeline.request_id, timeline.budget_hold,
                                  timeline.cost.usd or 0.0, utc_day(_arrived(timeline)))


def _arrived(timeline: Timeline) -> float:
    """The unix time the request arrived (its timeline keeps the monotonic clock's)."""
    return time.time() - (perf_counter() - timeline.received)


def pricing_for(settings: Settings, simulated_upstream: str | None) -> Pricing:
    """The config's prices, and the simulated region's GPUs at the shipped GPU-hour price of its place."""
    configured: dict[str, Rate] = {}
    for name, price in settings.spend.prices.items():
        if price.usd_per_gpu_hour is not None:
            configured[name] = GpuRate(price.usd_per_gpu_hour, price.gpus, price.source)
        else:
            assert price.usd_per_million_input is not None and price.usd_per_million_output is not None
            configured[name] = TokenRate.given(
                price.usd_per_million_input, price.usd_per_million_output, price.usd_per_million_cached_input,
                price.usd_per_million_cache_write, price.usd_per_million_cache_write_1h, price.source)
    upstream_rates: dict[str, Rate] = {}
    simulated = settings.simulated
    region = simulated.places[0] if simulated is not None else None
    if simulated is not None and simulated_upstream is not None and region is not None:
        try:
            row = gpu_hour(simulated.gpu, region.code or region.name)
            upstream_rates[simulated_upstream] = GpuRate(row.usd, simulated.tp, row.cited)
        except NoPrice:  # a place the table has no price for: the region's requests are unpriced
            pass
    return Pricing(configured, upstream_rates)
