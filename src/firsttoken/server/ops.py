"""The operator's routes: the journeys (one, or the latest), what the router knows, Prometheus metrics,
liveness and readiness."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from firsttoken.errors import GatewayError
from firsttoken.journey.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from firsttoken.journey.metrics_merge import merge_expositions
from firsttoken.journey.shared import SharedJourneys
from firsttoken.journey.timeline import Timeline
from firsttoken.server.auth import ClientKeys
from firsttoken.server.http import Headers, Receive, Scope, Send, response_headers, send_bytes, send_json
from firsttoken.server.peers import Peers
from firsttoken.server.worker_views import WorkerViews
from firsttoken.upstream.registry import Upstreams


class Ops:
    """Under `--workers N` (peers given), every answer but liveness and readiness covers all the workers,
    whichever of them the connection reached; the header `x-firsttoken-workers` says how many answered."""

    def __init__(self, keys: ClientKeys, views: WorkerViews, upstreams: Upstreams, peers: Peers | None = None,
                 shared: SharedJourneys | None = None) -> None:
        self.keys = keys
        self.views = views
        self.upstreams = upstreams
        self.peers = peers
        self.shared = shared  # every replica's journeys, in Redis

    def _answered(self, siblings: dict[int, Any]) -> Headers:
        if self.peers is None:
            return []
        return [(b"x-firsttoken-workers", f"{len(siblings) + 1}/{self.peers.cluster.size}".encode())]

    async def journey(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        request_id = scope["path"].removeprefix("/v1/journeys/")
        tenant = self.keys.viewer(scope)
        found = self.views.journey(request_id, tenant)
        if found is None and self.shared is not None:
            found = await self.shared.get(request_id, tenant)
        if found is None and self.peers is not None:
            found = await self.peers.journey(request_id, tenant)
        if found is None:
            raise GatewayError(404, f"No journey {request_id!r} among the last {self.views.journeys.capacity} "
                                    f"requests (or not one of yours). Journey ids are the x-request-id of a "
                                    f"response.", code="journey_not_found")
        await send_json(send, 200, found, response_headers(base, timeline))

    async def journey_list(self, scope: Scope, receive: Receive, send: Send, base: Headers,
                           timeline: Timeline) -> None:
        limit = _query_int(scope, "limit", default=20, low=1, high=1000)
        tenant = self.keys.viewer(scope)
        shared = await self.shared.latest(limit, tenant) if self.shared is not None else None
        if shared is not None:  # every replica's, and so every worker's
            await send_json(send, 200, {"object": "list", "data": shared},
                            response_headers(base, timeline))
            return
        timed = self.views.latest(limit, tenant)
        siblings = await self.peers.latest(limit, tenant) if self.peers is not None else {}
        for theirs in siblings.values():
            timed += [(at, journey) for at, journey in theirs]
        timed.sort(key=lambda pair: pair[0], reverse=True)
        await send_json(send, 200, {"object": "list", "data": [journey for _, journey in timed[:limit]]},
                        response_headers(base + self._answered(siblings), timeline))

    async def routing(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        """What the router knows of each target it has sent requests to: under `--workers N`, each worker's
        router, its entries marked with its `worker` slot."""
        self.keys.admin(scope, "/v1/routing")
        views = self.views.routing()
        siblings: dict[int, list[dict[str, Any]]] = {}
        if self.peers is not None:
            siblings = await self.peers.routing()
            siblings[self.peers.cluster.slot] = views
            views = [{**view, "worker": slot} for slot, theirs in sorted(siblings.items()) for view in theirs]
            del siblings[self.peers.cluster.slot]
        await send_json(send, 200, {"object": "list", "data": views},
                        response_headers(base + self._answered(siblings), timeline))

    async def prometheus(self, scope: Scope, receive: Receive, send: Send, base: Headers,
                         timeline: Timeline) -> None:
        self.keys.admin(scope, "/metrics")  # every tenant's traffic: a scraper sends the admin key
        exposition = self.views.exposition()
        siblings: dict[int, str] = {}
        if self.peers is not None:
            siblings = await self.peers.expositions()
            exposition = merge_expositions({**siblings, self.peers.cluster.slot: exposition.decode()})
        await send_bytes(send, 200, exposition, response_headers(base + self._answered(siblings), timeline),
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
