"""/dashboard: the page and its assets (shipped in the package, read once at start), and the data it draws:
the gateway's state (where it stands, its upstreams' regions, floors and round trips, each target's
breaker), the journeys in memory, the journey log's history, and every journey live as an SSE stream.

The data shows every tenant's journeys. With client keys configured it is locked behind the operator's
`admin_key`, which a client key never opens; without keys the gateway is open to its callers anyway
(loopback, or `allow_unauthenticated`), and so is its dashboard.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from importlib import resources
from time import monotonic, perf_counter
from typing import Any
from urllib.parse import parse_qs

from firsttoken import __version__
from firsttoken.config import SIM_UPSTREAM, Settings
from firsttoken.errors import GatewayError, not_found
from firsttoken.geo.places import Place
from firsttoken.journey import log as journey_log
from firsttoken.journey.attribution import attribute, phases, round_ms
from firsttoken.journey.feed import JourneyFeed, sse_event
from firsttoken.journey.recent import RecentJourneys
from firsttoken.journey.timeline import Timeline
from firsttoken.routing.keepwarm import KeepWarm
from firsttoken.routing.metrics import target_view
from firsttoken.routing.router import Router
from firsttoken.server.auth import ClientKeys
from firsttoken.server.http import SSE_HEADERS, Headers, Receive, Scope, Send, send_bytes, send_json
from firsttoken.upstream.registry import Upstreams

STATE_EVERY_S = 2.0  # how often the live stream carries the state (breakers, round trips)
PING_EVERY_S = 15.0  # a comment when nothing else was sent: proxies keep the stream open
HISTORY_S = 15 * 60  # what the page asks for when it opens
HISTORY_ROWS = 20_000  # the most the history answers with, the newest
RECENT_FOR_RTT = 200  # journeys in memory a round trip's median is taken over

_TYPES = {".html": b"text/html; charset=utf-8", ".js": b"text/javascript; charset=utf-8",
          ".css": b"text/css; charset=utf-8", ".json": b"application/json"}
# Everything from here; uPlot sizes its elements through the style attribute.
_SECURITY = [(b"content-security-policy", b"default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' "
                                          b"data:; frame-ancestors 'none'"),
             (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer")]


class Dashboard:
    def __init__(self, settings: Settings, keys: ClientKeys, journeys: RecentJourneys, feed: JourneyFeed,
                 router: Router, keep_warm: KeepWarm, upstreams: Upstreams) -> None:
        self.settings = settings
        self.keys = keys
        self.journeys = journeys
        self.feed = feed
        self.router = router
        self.keep_warm = keep_warm
        self.upstreams = upstreams
        self._assets = _read_assets()

    # --- the page ------------------------------------------------------------------------------

    async def page(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        await self._asset("index.html", send, base)

    async def asset(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        await self._asset(scope["path"].removeprefix("/dashboard/assets/"), send, base)

    async def _asset(self, name: str, send: Send, base: Headers) -> None:
        found = self._assets.get(name)
        if found is None:
            raise not_found(f"No dashboard asset {name!r}.", code="unknown_route")
        body, content_type = found
        # Vendored files change only with their version; ours with each release, so they are revalidated.
        caching = b"public, max-age=86400" if name.startswith("vendor/") else b"no-cache"
        await send_bytes(send, 200, body, [*base, *_SECURITY, (b"cache-control", caching)],
                         (b"content-type", content_type))

    # --- the data ------------------------------------------------------------------------------

    def _allow(self, scope: Scope) -> None:
        """Raise unless this caller may see every tenant's journeys."""
        self.keys.admin(scope, "The dashboard")

    async def auth(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        """Whether the key sent opens the data, always as a 200: a page that asks this way before it asks for
        data never meets a 401 (which the browser reports on its console whatever the page does)."""
        try:
            self._allow(scope)
            verdict: dict[str, Any] = {"locked": False, "error": None}
        except GatewayError as refused:
            verdict = {"locked": True, "error": {"message": refused.message, "code": refused.code}}
        await send_json(send, 200, verdict, [*base, (b"cache-control", b"no-store")])

    async def state(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        self._allow(scope)
        await send_json(send, 200, self.snapshot(), [*base, (b"cache-control", b"no-store")])

    async def recent(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        self._allow(scope)
        limit = _query_number(scope, "limit", 200, 1, self.journeys.capacity)
        now_wall, now = time.time(), perf_counter()
        data = [{**attribute(t).to_dict(), "at": round(now_wall - (now - t.received), 3)}
                for t in self.journeys.latest(int(limit), None)]
        await send_json(send, 200, {"data": data}, [*base, (b"cache-control", b"no-store")])

    async def journey(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        """One journey in memory, whole: its verdict, its handshake (the live stream carries neither)."""
        self._allow(scope)
        request_id = scope["path"].removeprefix("/dashboard/api/journeys/")
        found = self.journeys.get(request_id, None)
        if found is None:
            raise not_found(f"No journey {request_id!r} among the last {self.journeys.capacity} requests.",
                            code="journey_not_found")
        at = time.time() - (perf_counter() - found.received)
        await send_json(send, 200, {**attribute(found).to_dict(), "at": round(at, 3)},
                        [*base, (b"cache-control", b"no-store")])

    async def history(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        self._allow(scope)
        since = _query_number(scope, "since", time.time() - HISTORY_S, 0, time.time())
        path = self.settings.journeys.log
        rows = await asyncio.to_thread(journey_log.read, path, since, None, HISTORY_ROWS) if path else []
        await send_json(send, 200, {"data": [{**journey_log.journey_of(row).to_dict(), "at": row["at"]}
                                             for row in rows]},
                        [*base, (b"cache-control", b"no-store")])

    async def events(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        """Every journey as it finishes (`event: journey`), the state every STATE_EVERY_S (`event: state`)."""
        self._allow(scope)
        watcher = self.feed.watch()
        gone = asyncio.Event()

        async def until_gone() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()
            watcher.wake()

        watching = asyncio.get_running_loop().create_task(until_gone())
        try:
            await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *base]})
            await send({"type": "http.response.body", "body": sse_event("state", self.snapshot()),
                        "more_body": True})
            last_sent = monotonic()
            next_state = last_sent + STATE_EVERY_S
            while not gone.is_set():
                events = await watcher.next_events(max(0.0, next_state - monotonic()))
                now = monotonic()
                if now >= next_state:
                    events.append(sse_event("state", self.snapshot()))
                    next_state = now + STATE_EVERY_S
                if not events and now - last_sent >= PING_EVERY_S:
                    events.append(b": ping\n\n")
                if events and not gone.is_set():
                    await send({"type": "http.response.body", "body": b"".join(events), "more_body": True})
                    last_sent = now
        finally:
            self.feed.leave(watcher)
            watching.cancel()

    def snapshot(self) -> dict[str, Any]:
        """What the page draws besides the journeys: the map's places and each target's state."""
        # Answered journeys only: a refusal (an unknown model) can come back before the distance is declared.
        recent = [t for t in self.journeys.latest(RECENT_FOR_RTT, None) if t.status < 400 and not t.error_code]
        upstreams = []
        for name, link in self.upstreams.links.items():
            rtts = [rtt for t in recent if t.upstream == name and (rtt := phases(t)[0].rtt) is not None]
            upstreams.append({"name": name, "api": link.settings.api, "simulated": name == SIM_UPSTREAM,
                              "region": _place(link.settings.place), "floor_ms": round_ms(link.floor_ms),
                              "rtt_ms": round_ms(statistics.median(rtts)) if rtts else None})
        # The router remembers every target it was asked for, typos too: shown are those an alias names
        # and those that answered lately.
        named = {target for targets in self.settings.models.values() for target in targets}
        answered = {t.route for t in recent}
        targets = []
        for state in self.router.states():
            if state.target.label in named or state.target.label in answered:
                targets.append({**target_view(self.router, state, self.keep_warm), "upstream": state.target.upstream})
        cache = self.settings.cache
        return {"version": __version__, "now": round(time.time(), 3),
                "gateway": {"location": _place(self.settings.place)},
                "upstreams": upstreams, "targets": targets,
                "cache": {"enabled": cache.enabled, "semantic": cache.enabled and cache.semantic,
                          "similarity": cache.similarity}}


def _read_assets() -> dict[str, tuple[bytes, bytes]]:
    """Every file under assets/, by its path there: a few hundred KB, read once."""
    found: dict[str, tuple[bytes, bytes]] = {}
    root = resources.files("firsttoken.dashboard") / "assets"
    folders = [(root, "")]
    while folders:
        folder, prefix = folders.pop()
        for entry in folder.iterdir():
            if entry.is_dir():
                folders.append((entry, f"{prefix}{entry.name}/"))
            elif (kind := _TYPES.get("." + entry.name.rpartition(".")[2])) is not None:
                found[prefix + entry.name] = (entry.read_bytes(), kind)
    return found


def _place(place: Place | None) -> dict[str, Any] | None:
    return None if place is None else {"name": place.name, "lat": place.lat, "lon": place.lon}


def _query_number(scope: Scope, name: str, default: float, low: float, high: float) -> float:
    values = parse_qs(scope.get("query_string", b"").decode(errors="replace")).get(name)
    if not values:
        return default
    try:
        value = float(values[0])
    except ValueError:
        raise GatewayError(400, f"{name} must be a number", param=name, code="invalid_value") from None
    return min(max(value, low), high)
