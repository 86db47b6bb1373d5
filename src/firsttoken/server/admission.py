"""Letting a request in: whose it is (its client key), its body read and bounded, and the work it asks
for run within the key's budget, its rate limits and the client's deadline."""

from __future__ import annotations

import time
from typing import Any

from firsttoken.alarms import Alarms
from firsttoken.config import Limits
from firsttoken.journey.recent import RecentJourneys
from firsttoken.journey.timeline import Timeline
from firsttoken.routing.client_limits import (
    Charge,
    ClientLimits,
    answer_limit,
    estimate_prompt_tokens,
    upstream_tokens,
)
from firsttoken.server import validate
from firsttoken.server.auth import ClientKeys
from firsttoken.server.deadline import CLIENT_DEADLINE, ClientDeadline
from firsttoken.server.http import Headers, Receive, Scope, read_body
from firsttoken.spend.budgets import Budgets
from firsttoken.spend.cost import GpuRate, Pricing, TokenRate
from firsttoken.spend.usage import Tokens


class Admission:
    def __init__(self, keys: ClientKeys, client_limits: ClientLimits, limits: Limits, journeys: RecentJourneys,
                 alarms: Alarms, pricing: Pricing, budgets: Budgets) -> None:
        self.keys = keys
        self.client_limits = client_limits
        self.pricing = pricing
        self.budgets = budgets
        self.limits = limits  # the body's size, depth, messages and strings: checked as it is parsed
        self.journeys = journeys
        self.alarms = alarms

    async def body(self, scope: Scope, receive: Receive, timeline: Timeline) -> dict[str, Any]:
        """Authenticate (the request becomes a journey), then the body as a bounded JSON object."""
        timeline.tenant = self.keys.tenant(scope)
        self.journeys.add(timeline)
        return validate.parse_json_object(await read_body(scope, receive, self.limits.max_body_bytes), self.limits)

    async def priced(self, timeline: Timeline, body: dict[str, Any], base: Headers, route: str) -> None:
        """The request will be costed at the end (spend/meter.py); refused here (429) when the most it may
        cost (its prompt and max_tokens at the price of `route`, its first target) does not fit in its key's
        budget. Its answer will say where the key's budgets stand."""
        timeline.pricing = self.pricing
        timeline.prompt_estimate = estimate_prompt_tokens(body)
        if self.budgets.has(timeline.tenant):
            most = self._most(route, timeline.prompt_estimate, answer_limit(body))
            base += await self.budgets.admit(timeline.tenant, most, time.time(), timeline.request_id)
            timeline.budget_hold = most

    def _most(self, route: str, prompt_tokens: int, answer_tokens: int) -> float:
        """The most a request may cost on `route`: its tokens at the route's price; on a GPU-hour route, the
        GPUs alone for as long as the route's measured speed says it takes (nothing before it has a speed)."""
        rate = self.pricing.rate(route)
        if isinstance(rate, TokenRate):
            return rate.usd(Tokens(prompt_tokens, answer_tokens))
        if isinstance(rate, GpuRate):
            seconds = self.pricing.speeds.seconds(route, answer_tokens)
            return rate.usd(seconds, 1) if seconds is not None else 0.0
        return 0.0

    async def admit(self, scope: Scope, timeline: Timeline, body: dict[str, Any], stream: bool) -> Charge | None:
        """Within the client key's rate limits (or the 429 that says which and for how long), and under its
        deadline from here on. What it was charged goes to `settle` once the request has ended, however it
        ended. (A pair of calls, not an async context manager: that cost 1.7 µs a request, timeit.)"""
        charge = await self.client_limits.admit(timeline.tenant, body) if self.client_limits else None
        CLIENT_DEADLINE.set(ClientDeadline.from_headers(scope["headers"], stream, self.alarms.now()))
        return charge

    async def settle(self, charge: Charge | None, timeline: Timeline) -> None:
        """The charge corrected from the request's usage."""
        if charge is not None:
            await self.client_limits.settle(charge, upstream_tokens(timeline))
