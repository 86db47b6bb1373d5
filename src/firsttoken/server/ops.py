"""The operator's routes: the journeys (one, or the latest), what the router knows, Prometheus metrics,
liveness and readiness."""

from __future__ import annotations

from urllib.parse import parse_qs

from firsttoken.errors import GatewayError
from firsttoken.journey.attribution import attribute
from firsttoken.journey.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from firsttoken.journey.metrics import Metrics
from firsttoken.journey.recent import RecentJourneys
from firsttoken.journey.sink import JourneySink
from firsttoken.journey.timeline import Timeline
from firsttoken.routing.keepwarm import KeepWarm
from firsttoken.routing.metrics import target_view
from firsttoken.routing.router import Router
from firsttoken.server.auth import ClientKeys
from firsttoken.server.http import Headers, Receive, Scope, Send, response_headers, send_bytes, send_json
from firsttoken.upstream.registry import Upstreams


class Ops:
    def __init__(self, keys: ClientKeys, journeys: RecentJourneys, sink: JourneySink, metrics: Metrics,
                 router: Router, keep_warm: KeepWarm, upstreams: Upstreams) -> None:
        self.keys = keys
        self.journeys = journeys
        self.sink = sink
        self.metrics = metrics
        self.router = router
        self.keep_warm = keep_warm
        self.upstreams = upstreams

    async def journey(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        request_id = scope["path"].removeprefix("/v1/journeys/")
        found = self.journeys.get(request_id, self.keys.viewer(scope))
        if found is None:
            raise GatewayError(404, f"No journey {request_id!r} among the last {self.journeys.capacity} requests "
                                    f"(or not one of yours). Journey ids are the x-request-id of a response.",
                               code="journey_not_found")
        await send_json(send, 200, attribute(found).to_dict(), response_headers(base, timeline))

    async def journey_list(self, scope: Scope, receive: Receive, send: Send, base: Headers,
                           timeline: Timeline) -> None:
        limit = _query_int(scope, "limit", default=20, low=1, high=1000)
        journeys = [attribute(t).to_dict() for t in self.journeys.latest(limit, self.keys.viewer(scope))]
        await send_json(send, 200, {"object": "list", "data": journeys}, response_headers(base, timeline))

    async def routing(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        """What the router knows of each target it has sent requests to (this worker's)."""
        self.keys.admin(scope, "/v1/routing")
        await send_json(send, 200, {"object": "list", "data": [target_view(self.router, state, self.keep_warm)
                                                                for state in self.router.states()]},
                        response_headers(base, timeline))

    async def prometheus(self, scope: Scope, receive: Receive, send: Send, base: Headers,
                         timeline: Timeline) -> None:
        self.keys.admin(scope, "/metrics")  # every tenant's traffic: a scraper sends the admin key
        self.sink.take_batch()  # what finished up to now, not up to the last batch
        await send_bytes(send, 200, self.metrics.exposition(), response_headers(base, timeline),
                         (b"content-type", METRICS_CONTENT_TYPE.encode()))

    async def healthz(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        await send_json(send, 200, {"status": "ok"}, response_headers(base, timeline))

    async def readyz(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        upstreams = {name: {"warm": link.pool.state.warm, "error": link.pool.state.last_error,
                            "connections_opened": link.pool.state.connections_opened}
                     for name, link in self.upstreams.links.items()}
        ready = self.upstreams.ready()
        await send_json(send, 200 if ready else 503, {"ready": ready, "upstreams": upstreams},
                        response_headers(base, timeline))


def _query_int(scope: Scope, name: str, default: int, low: int, high: int) -> int:
    """An integer query parameter within [low, high], or a 400 that says so."""
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get(name)
    if not values:
        return default
    try:
        value = int(values[-1])
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise GatewayError(400, f"{name} must be an integer from {low} to {high}, got {values[-1]!r}.", param=name,
                           code="invalid_query")
    return value
