"""The most recent journeys, kept in memory for GET /v1/journeys: bounded, newest last, per tenant on
the way out. Timelines are stored as they are; attribution happens when one is asked for."""

from __future__ import annotations

from collections import OrderedDict

from firsttoken.journey.timeline import Timeline

DEFAULT_CAPACITY = 10_000


class RecentJourneys:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._by_id: OrderedDict[str, Timeline] = OrderedDict()

    def add(self, timeline: Timeline) -> None:
        self._by_id[timeline.request_id] = timeline
        if len(self._by_id) > self.capacity:
            self._by_id.popitem(last=False)

    def get(self, request_id: str, tenant: str | None) -> Timeline | None:
        """The journey, if `tenant` may see it (None: every tenant's)."""
        timeline = self._by_id.get(request_id)
        if timeline is None or (tenant is not None and timeline.tenant != tenant):
            return None
        return timeline

    def latest(self, limit: int, tenant: str | None) -> list[Timeline]:
        """Up to `limit` finished journeys, newest first."""
        found: list[Timeline] = []
        for timeline in reversed(self._by_id.values()):
            if timeline.last_byte and (tenant is None or timeline.tenant == tenant):
                found.append(timeline)
                if len(found) >= limit:
                    break
        return found
