"""The gateway as an ASGI application: routes, lifespan, and the wiring of its parts."""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import os
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any, TypeVar
from urllib.parse import parse_qs

from firsttoken import config as config_module
from firsttoken.alarms import Alarms
from firsttoken.answers import answer_gap
from firsttoken.cache.edge import EdgeCache, Lookup
from firsttoken.cache.entry import Kind
from firsttoken.cache.flight import Flight, Flights
from firsttoken.cache.metrics import CacheCollector
from firsttoken.cache.outcome import CacheOutcome
from firsttoken.config import SIM_UPSTREAM, Settings
from firsttoken.errors import GatewayError
from firsttoken.journey.attribution import attribute
from firsttoken.journey.log import JourneyLog
from firsttoken.journey.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from firsttoken.journey.metrics import Metrics
from firsttoken.journey.otlp import OtlpExporter
from firsttoken.journey.recent import RecentJourneys
from firsttoken.journey.sink import JourneySink
from firsttoken.journey.tcp_info import RttReader, client_transport
from firsttoken.journey.timeline import Timeline
from firsttoken.redact import Redactor, redact_logs
from firsttoken.routing.client_limits import ClientLimits, upstream_tokens
from firsttoken.routing.keepwarm import KeepWarm
from firsttoken.routing.metrics import RoutingCollector, target_view
from firsttoken.routing.router import Router
from firsttoken.routing.sizing import TaskRouter
from firsttoken.routing.targets import Target, TargetResolver
from firsttoken.server import validate
from firsttoken.server.auth import ClientKeys
from firsttoken.server.cached import send_cached, send_followed
from firsttoken.server.forward import (
    CLIENT_DEADLINE,
    ClientDeadline,
    Keep,
    StreamForwarder,
    client_wants_usage,
    forward_complete,
)
from firsttoken.server.http import (
    ClientDisconnected,
    ClientStalled,
    Headers,
    Receive,
    Scope,
    Send,
    read_body,
    response_headers,
    send_bytes,
    send_error,
    send_json,
)
from firsttoken.server.reply import Reply
from firsttoken.sim.embedded import EmbeddedRegion
from firsttoken.upstream.registry import UpstreamLink, Upstreams

log = logging.getLogger("firsttoken.server")
T = TypeVar("T")

Handler = Callable[[Scope, Receive, Send, Headers, Timeline], Awaitable[None]]


class Gateway:
    def __init__(self, settings: Settings) -> None:
        self.embedded: EmbeddedRegion | None = None
        simulated = settings.simulated
        if simulated is not None:
            self.embedded = EmbeddedRegion(simulated)
            settings = settings.with_upstream(SIM_UPSTREAM, {"url": self.embedded.url, "api": "openai",
                                                             "region": simulated.region})
            if settings.location is None:  # the gateway stands where the region's clients are
                settings = settings.model_copy(update={"location": simulated.client_location})
        self.settings = settings
        secrets = settings.secrets()
        self.credentials = Redactor(secrets)
        redact_logs(secrets)  # whatever a library or we log, no credential of ours is in it
        self.upstreams = Upstreams(settings.upstreams, settings.place)
        self.journeys = RecentJourneys(settings.journeys.recent)
        self.client_rtt = RttReader()
        self.metrics = Metrics()
        journeys = settings.journeys
        journey_log = None
        if journeys.log:
            journey_log = JourneyLog(journeys.log, journeys.max_rows, journeys.max_age_days * 86400)
        spans = None
        if journeys.otlp is not None:
            otlp = journeys.otlp
            spans = OtlpExporter(otlp.endpoint, {k: v.get_secret_value() for k, v in otlp.headers.items()},
                                 otlp.service_name)
        self.sink = JourneySink(journey_log, self.metrics, spans)
        cache = settings.cache
        self.cache = EdgeCache(cache) if cache is not None and cache.backend != "none" else None
        if self.cache is not None:
            self.metrics.registry.register(CacheCollector(self.cache))
        self.flights = Flights()
        self.client_stall_s = settings.streaming.client_stall_s
        self.alarms = Alarms()
        # request ids: a per-process random prefix and a counter; unique without a syscall per request
        self._id_prefix = os.urandom(6).hex().encode()
        self._ids = itertools.count(1)
        self.resolver = TargetResolver(settings, self.upstreams.listed_models)
        self.router = Router(settings.routing, lambda upstream: self.upstreams[upstream].floor_ms)
        self.keep_warm = KeepWarm(self.router, self.upstreams)
        self.task_router = TaskRouter(settings.sizing) if settings.sizing is not None else None
        self.metrics.registry.register(RoutingCollector(self.router, self.keep_warm))
        self.keys = ClientKeys(settings.keys)
        self.client_limits = ClientLimits(settings.keys, settings.limits.redis)
        self.max_body = settings.limits.max_body_bytes
        self.body_limits = settings.limits  # depth, messages, string sizes: checked as a body is parsed
        self.heartbeat_s = settings.streaming.heartbeat_s
        # Paths with and without the /v1 prefix: some clients are configured with a bare base URL.
        self.routes: dict[str, dict[str, Handler]] = {}
        for path, method, handler in (
            ("/chat/completions", "POST", self.chat_completions),
            ("/embeddings", "POST", self.embeddings),
            ("/models", "GET", self.models),
        ):
            self.routes.setdefault(f"/v1{path}", {})[method] = handler
            self.routes.setdefault(path, {})[method] = handler
        self.routes["/v1/journeys"] = {"GET": self.journey_list}
        self.routes["/v1/routing"] = {"GET": self.routing}
        self.prefix_routes: dict[str, dict[str, Handler]] = {"/v1/journeys/": {"GET": self.journey}}
        self.routes["/metrics"] = {"GET": self.prometheus}
        self.routes["/healthz"] = {"GET": self.healthz}
        self.routes["/readyz"] = {"GET": self.readyz}

    # --- ASGI --------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    self.alarms.start()
                    self.sink.start()
                    if self.cache is not None:
                        await self.cache.start()  # the embedding model, when semantic caching is on
                    if self.embedded is not None:
                        await self.embedded.start()
                    await self.upstreams.start()
                    self.keep_warm.start()
                    if self.task_router is not None and self.task_router.settings.neighbours:
                        try:
                            await asyncio.to_thread(self.task_router.load_neighbours)
                        except (ImportError, RuntimeError) as exc:  # rules alone size requests then
                            log.warning("task sizing by rules only: %s", exc)
                except Exception as exc:  # reported to the server, which refuses to start
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                # What start-up built (modules, settings, the places table, pools) lives as long as the
                # process: out of the collector's reach, a full collection no longer walks it (30 ms each,
                # measured, and one every few thousand requests).
                gc.freeze()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.keep_warm.close()
                await self.upstreams.close()
                if self.embedded is not None:
                    await self.embedded.close()
                await self.alarms.close()
                self.sink.take_batch()
                await asyncio.to_thread(self.sink.close)  # the last journeys reach the log
                if self.cache is not None:
                    await self.cache.close()  # and the last answers the cache
                await self.client_limits.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_id = b"req_%s%x" % (self._id_prefix, next(self._ids))
        timeline = Timeline(request_id.decode())
        timeline.client_rtt = self.client_rtt.rtt(client_transport(receive), timeline.received)
        base: Headers = [(b"x-request-id", request_id)]
        methods = self.routes.get(scope["path"])
        if methods is None:
            methods = next((m for prefix, m in self.prefix_routes.items() if scope["path"].startswith(prefix)), None)
        try:
            if methods is None:
                raise GatewayError(404, f"No route {scope['path']}; this gateway serves /v1/chat/completions, "
                                        f"/v1/embeddings and /v1/models.", code="unknown_route")
            handler = methods.get(scope["method"])
            if handler is None:
                raise GatewayError(405, f"{scope['method']} is not allowed on {scope['path']}; use "
                                        f"{', '.join(methods)}.", code="method_not_allowed",
                                   headers={"allow": ", ".join(methods)})
            await handler(scope, receive, send, base, timeline)
        except GatewayError as error:
            timeline.status = error.status
            timeline.failed(error.code or error.type, error.message)
            await send_error(send, error, response_headers(base, timeline))
        except ClientDisconnected:
            pass
        except ClientStalled as stalled:  # the connection is dropped when we return unfinished
            log.info("dropping a stalled client: %s", stalled)
        except Exception:  # a bug: say so in OpenAI's format rather than drop the connection
            log.exception("unexpected error on %s %s", scope["method"], scope["path"])
            timeline.failed("internal_error", "the gateway failed unexpectedly")
            try:
                await send_error(send, GatewayError(500, "The gateway failed unexpectedly; this is a bug in "
                                                         "firsttoken, and the log has the details.",
                                                    type="server_error", code="internal_error"),
                                 response_headers(base, timeline))
            except Exception:
                pass
            timeline.status = 500
        finally:
            if timeline.tenant:  # a journey: it reached the point of being somebody's request
                timeline.last_byte = timeline.last_byte or perf_counter()
                self.sink.put(timeline)

    # --- endpoints ---------------------------------------------------------------------------

    async def chat_completions(self, scope: Scope, receive: Receive, send: Send, base: Headers,
                               timeline: Timeline) -> None:
        self._record(scope, timeline)
        body = validate.parse_json_object(await read_body(scope, receive, self.max_body), self.body_limits)
        model, stream = validate.chat_request(body)
        timeline.model, timeline.stream = model, stream
        if self.task_router is not None and model == self.task_router.settings.alias:
            tier, sized = await self.task_router.decide(scope["headers"], body)
            base.append((b"x-firsttoken-size", sized))
            targets = [t for name in self.task_router.settings.tiers[tier] for t in self.resolver.resolve(name)]
        else:
            targets = self.resolver.resolve(model)
        await self._limited(scope, timeline, body, stream,
                            lambda: self._chat(scope, receive, send, base, timeline, body, model, stream, targets))

    async def _limited(self, scope: Scope, timeline: Timeline, body: dict[str, Any], stream: bool,
                       work: Callable[[], Awaitable[None]]) -> None:
        """`work`, within the client key's rate limits (corrected from its usage after) and its deadline."""
        charge = await self.client_limits.admit(timeline.tenant, body) if self.client_limits else None
        CLIENT_DEADLINE.set(ClientDeadline.from_headers(scope["headers"], stream, self.alarms.now()))
        try:
            await work()
        finally:
            if charge is not None:
                await self.client_limits.settle(charge, upstream_tokens(timeline))

    async def _chat(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline,
                    body: dict[str, Any], model: str, stream: bool, targets: list[Target]) -> None:
        wants_usage = client_wants_usage(body)
        reply = Reply(send, base, timeline, self.alarms, self.client_stall_s)

        def build(link: UpstreamLink, target: Target) -> Any:
            return link.adapter.chat(body, target.model, stream)

        async def forward(keep: Keep | None = None, capture: Flight | None = None) -> None:
            ordered = self.router.order(model, targets, stream)  # only for requests that go upstream
            if stream:
                forwarder = StreamForwarder(self.upstreams, self.alarms, self.router, ordered, build, reply,
                                            client_wants_usage=wants_usage, heartbeat_s=self.heartbeat_s, keep=keep,
                                            capture=capture)
                await until_disconnect(receive, forwarder.run(), self.alarms)
            else:
                await until_disconnect(receive, forward_complete(
                    self.upstreams, self.alarms, self.router, ordered, build,
                    lambda link, data: link.adapter.chat_response(data), reply, keep), self.alarms)

        cache, lookup = self.cache, None
        if cache is not None:
            looked_up = perf_counter()
            lookup = await cache.lookup(scope["headers"], timeline.tenant, model, [t.label for t in targets], body)
            timeline.cache_ms = (perf_counter() - looked_up) * 1000.0
        if cache is None or lookup is None:
            await forward()
            return
        if lookup.hit is not None:
            route, similarity = lookup.hit.model, lookup.similarity
            answer = await cache.replay(lookup, stream, wants_usage)  # None: dropped, and a miss
            if answer is not None:
                await send_cached(reply, answer, route, stream, similarity)
                return
        flight = self.flights.get(lookup.key) if lookup.read else None
        if flight is not None:
            joined = await until_disconnect(receive, send_followed(reply, flight, stream, wants_usage), self.alarms)
            if joined is not False:  # answered by the identical request in flight, or the client left (None)
                return
        timeline.cache = CacheOutcome.MISS
        flight = self.flights.lead(lookup.key, timeline)
        try:
            await forward(self._keeper(lookup, timeline, flight), flight)
        finally:
            self.flights.land(lookup.key, flight)

    def _keeper(self, lookup: Lookup, timeline: Timeline, flight: Flight) -> Keep:
        """Where a clean answer to this request goes: to the requests that joined it, and into the cache
        when it may be kept."""
        cache = self.cache
        assert cache is not None

        def keep(kind: Kind, answer: bytes, headers: Any) -> None:
            try:
                gap = answer_gap(kind, answer, self.credentials)
            except Exception:  # a bug; but the answer has reached its client, and keeping is optional
                log.exception("could not check an answer from %s; not keeping it", timeline.route)
                gap = "not checked"
            if gap is not None:  # it reached this client as it was; nobody else gets it
                cache.not_keeping(gap)
                log.info("not keeping an answer from %s: %s", timeline.route, gap)
                flight.finish(ended_well=True)
                return
            flight.finish(kind, answer)
            cache.keep(lookup, kind, answer, timeline.route, headers)

        return keep

    async def embeddings(self, scope: Scope, receive: Receive, send: Send, base: Headers,
                         timeline: Timeline) -> None:
        self._record(scope, timeline)
        timeline.operation = "embeddings"
        body = validate.parse_json_object(await read_body(scope, receive, self.max_body), self.body_limits)
        timeline.model = validate.embeddings_request(body)
        targets = self.resolver.resolve(timeline.model)
        await self._limited(scope, timeline, body, False,
                            lambda: self._embed(receive, send, base, timeline, body, targets))

    async def _embed(self, receive: Receive, send: Send, base: Headers, timeline: Timeline, body: dict[str, Any],
                     targets: list[Target]) -> None:
        await until_disconnect(receive, forward_complete(
            self.upstreams, self.alarms, self.router, self.router.order(timeline.model, targets, False),
            lambda link, target: link.adapter.embeddings(body, target.model),
            lambda link, data: link.adapter.embeddings_response(data),
            Reply(send, base, timeline, self.alarms, self.client_stall_s)), self.alarms)

    async def models(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        self.keys.tenant(scope)
        data = [{"id": alias, "object": "model", "created": 0, "owned_by": "firsttoken",
                 "targets": [t.label for t in targets]} for alias, targets in self.resolver.aliases.items()]
        for name in self.upstreams.links:
            data += [{"id": f"{name}/{model}", "object": "model", "created": 0, "owned_by": name}
                     for model in self.resolver.models_of(name)]
        if self.embedded is not None:  # say plainly which answers come from a simulation
            for entry in data:
                if entry["id"].startswith(f"{SIM_UPSTREAM}/"):
                    entry["description"] = self.embedded.description
        await send_json(send, 200, {"object": "list", "data": data}, response_headers(base, timeline))

    def _record(self, scope: Scope, timeline: Timeline) -> None:
        """Authenticate, and keep this request's timeline among the recent journeys."""
        timeline.tenant = self.keys.tenant(scope)
        self.journeys.add(timeline)

    async def routing(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        """What the router knows of each target it has sent requests to (this worker's)."""
        self.keys.tenant(scope)
        await send_json(send, 200, {"object": "list", "data": [target_view(self.router, state, self.keep_warm)
                                                                for state in self.router.states()]},
                        response_headers(base, timeline))

    def _visible_to(self, scope: Scope) -> str | None:
        """The tenant whose journeys this caller may read; None (all of them) when no keys are configured."""
        tenant = self.keys.tenant(scope)
        return tenant if self.settings.keys else None

    async def journey(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        request_id = scope["path"].removeprefix("/v1/journeys/")
        found = self.journeys.get(request_id, self._visible_to(scope))
        if found is None:
            raise GatewayError(404, f"No journey {request_id!r} among the last {self.journeys.capacity} requests "
                                    f"(or not one of yours). Journey ids are the x-request-id of a response.",
                               code="journey_not_found")
        await send_json(send, 200, attribute(found).to_dict(), response_headers(base, timeline))

    async def journey_list(self, scope: Scope, receive: Receive, send: Send, base: Headers,
                           timeline: Timeline) -> None:
        limit = _query_int(scope, "limit", default=20, low=1, high=1000)
        journeys = [attribute(t).to_dict() for t in self.journeys.latest(limit, self._visible_to(scope))]
        await send_json(send, 200, {"object": "list", "data": journeys}, response_headers(base, timeline))

    async def prometheus(self, scope: Scope, receive: Receive, send: Send, base: Headers,
                         timeline: Timeline) -> None:
        self.keys.tenant(scope)  # with client keys configured, a scraper sends one too
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


async def until_disconnect(receive: Receive, work: Awaitable[T], alarms: Alarms) -> T | None:
    """Run `work`, cancelling it when the client goes away, so an abandoned request stops (its
    upstream connection aborted, so the provider stops generating too).

    The watch starts only once a request has lived for one tick of the alarms: most requests are
    over before then, and a watcher task for each of them cost a tenth of the gateway's CPU."""
    task = asyncio.current_task()
    assert task is not None
    gone = False
    watcher: asyncio.Task[None] | None = None

    async def watch() -> None:
        nonlocal gone
        while (await receive())["type"] != "http.disconnect":
            pass
        gone = True
        task.cancel()

    def start_watching() -> None:
        nonlocal watcher
        watcher = asyncio.get_running_loop().create_task(watch())

    later = alarms.call_later(0.0, start_watching)
    try:
        return await work
    except asyncio.CancelledError:
        if not gone:
            raise
        task.uncancel()
        return None
    finally:
        alarms.disarm(later)
        if watcher is not None:
            watcher.cancel()


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


def create_app(settings: Settings) -> Gateway:
    return Gateway(settings)


def app_from_environment() -> Gateway:
    """The factory uvicorn calls in each worker: settings travel through the environment."""
    overrides = {}
    if os.environ.get("FIRSTTOKEN_HOST"):
        overrides["listen.host"] = os.environ["FIRSTTOKEN_HOST"]
    if os.environ.get("FIRSTTOKEN_PORT"):
        overrides["listen.port"] = int(os.environ["FIRSTTOKEN_PORT"])
    return Gateway(config_module.load(os.environ.get("FIRSTTOKEN_CONFIG") or None, overrides=overrides))


__all__ = ["Gateway", "create_app", "app_from_environment"]

