"""What one worker knows of itself, as the operator's routes report it: its metrics, its recent journeys,
its routing state. Ops asks this process's views and, under `--workers N`, its siblings' (server/peers.py)
for the same."""

from __future__ import annotations

from typing import Any

from firsttoken.journey.attribution import attribute
from firsttoken.journey.metrics import Metrics
from firsttoken.journey.recent import RecentJourneys
from firsttoken.journey.sink import JourneySink
from firsttoken.routing.keepwarm import KeepWarm
from firsttoken.routing.metrics import target_view
from firsttoken.routing.router import Router

# A journey with when it started (perf_counter: CLOCK_MONOTONIC, so comparable across the workers of one
# machine), for merging several workers' lists newest first.
TimedJourney = tuple[float, dict[str, Any]]


class WorkerViews:
    def __init__(self, journeys: RecentJourneys, sink: JourneySink, metrics: Metrics, router: Router,
                 keep_warm: KeepWarm) -> None:
        self.journeys = journeys
        self.sink = sink
        self.metrics = metrics
        self.router = router
        self.keep_warm = keep_warm

    def exposition(self) -> bytes:
        self.sink.take_batch()  # what finished up to now, not up to the last batch
        return self.metrics.exposition()

    def latest(self, limit: int, tenant: str | None) -> list[TimedJourney]:
        return [(t.received, attribute(t).to_dict()) for t in self.journeys.latest(limit, tenant)]

    def journey(self, request_id: str, tenant: str | None) -> dict[str, Any] | None:
        found = self.journeys.get(request_id, tenant)
        return None if found is None else attribute(found).to_dict()

    def routing(self) -> list[dict[str, Any]]:
        return [target_view(self.router, state, self.keep_warm) for state in self.router.states()]

    def idle_s(self, label: str) -> float | None:
        """Seconds since this worker last used the target (0 while in use); None if it never has."""
        state = next((s for s in self.router.states() if s.target.label == label), None)
        return None if state is None or state.idle_since is None else self.router.idle_for(state)
