"""Letting a request in: whose it is (its client key), its body read and bounded, and the work it asks
for run within the key's rate limits and the client's deadline."""

from __future__ import annotations

from typing import Any

from firsttoken.alarms import Alarms
from firsttoken.config import Limits
from firsttoken.journey.recent import RecentJourneys
from firsttoken.journey.timeline import Timeline
from firsttoken.routing.client_limits import Charge, ClientLimits, upstream_tokens
from firsttoken.server import validate
from firsttoken.server.auth import ClientKeys
from firsttoken.server.deadline import CLIENT_DEADLINE, ClientDeadline
from firsttoken.server.http import Receive, Scope, read_body


class Admission:
    def __init__(self, keys: ClientKeys, client_limits: ClientLimits, limits: Limits, journeys: RecentJourneys,
                 alarms: Alarms) -> None:
        self.keys = keys
        self.client_limits = client_limits
        self.limits = limits  # the body's size, depth, messages and strings: checked as it is parsed
        self.journeys = journeys
        self.alarms = alarms

    async def body(self, scope: Scope, receive: Receive, timeline: Timeline) -> dict[str, Any]:
        """Authenticate (the request becomes a journey), then the body as a bounded JSON object."""
        timeline.tenant = self.keys.tenant(scope)
        self.journeys.add(timeline)
        return validate.parse_json_object(await read_body(scope, receive, self.limits.max_body_bytes), self.limits)

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
