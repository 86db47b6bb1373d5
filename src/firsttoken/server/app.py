"""The gateway as an ASGI application: the wiring of its parts, its routes and its lifespan. Each route's
handling lives in its own module: chat completions, Messages and Responses (server/chat.py, one Generation
per client format from formats/), Messages' token counts (server/count_tokens.py), embeddings and models
(server/catalog.py), the operator's routes (server/ops.py)."""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import os
from collections.abc import Awaitable, Callable
from time import perf_counter

from firsttoken import config as config_module
from firsttoken.alarms import Alarms
from firsttoken.cache.edge import EdgeCache
from firsttoken.cache.metrics import CacheCollector
from firsttoken.config import SIM_UPSTREAM, Settings
from firsttoken.errors import GatewayError
from firsttoken.formats.chat import CHAT
from firsttoken.formats.client import ClientFormat
from firsttoken.formats.messages import MESSAGES
from firsttoken.formats.response_store import ResponseStore
from firsttoken.formats.responses import ResponsesFormat
from firsttoken.journey.feed import JourneyFeed
from firsttoken.journey.log import JourneyLog
from firsttoken.journey.metrics import Metrics
from firsttoken.journey.otlp import OtlpExporter
from firsttoken.journey.recent import RecentJourneys
from firsttoken.journey.shared import SharedJourneys
from firsttoken.journey.sink import BATCH_S, JourneySink
from firsttoken.journey.tcp_info import RttReader, client_transport
from firsttoken.journey.timeline import Timeline
from firsttoken.redact import Redactor, redact_logs
from firsttoken.routing.client_limits import ClientLimits
from firsttoken.routing.keepwarm import KeepWarm
from firsttoken.routing.metrics import RoutingCollector
from firsttoken.routing.router import Router
from firsttoken.routing.sizing import TaskRouter
from firsttoken.routing.targets import TargetResolver
from firsttoken.server import access_log
from firsttoken.server.admission import Admission
from firsttoken.server.auth import ClientKeys
from firsttoken.server.catalog import Catalog, speaks_anthropic
from firsttoken.server.chat import Generation
from firsttoken.server.cluster import SHARED_REGION_ENV, Cluster
from firsttoken.server.cors import Cors, is_preflight
from firsttoken.server.count_tokens import CountTokens
from firsttoken.server.dashboard import Dashboard
from firsttoken.server.egress import Egress
from firsttoken.server.http import (
    ClientDisconnected,
    ClientStalled,
    Headers,
    Receive,
    Scope,
    Send,
    response_headers,
    send_error,
)
from firsttoken.server.logs import configure_logging
from firsttoken.server.memory_trim import MemoryTrimmer
from firsttoken.server.ops import Ops
from firsttoken.server.peers import ClusterPings, Peers, PeerServer, bucket_keeper
from firsttoken.server.process_metrics import register_process_metrics
from firsttoken.server.spend_route import SpendRoute
from firsttoken.server.worker_views import WorkerViews
from firsttoken.sim.embedded import EmbeddedRegion
from firsttoken.sim.embedded import describe as describe_region
from firsttoken.spend.budgets import Budgets
from firsttoken.spend.ledger import SpendLedger
from firsttoken.spend.meter import SpendMeter, pricing_for
from firsttoken.spend.shared import SharedSpend
from firsttoken.upstream.metrics import PoolCollector
from firsttoken.upstream.registry import Upstreams

FULL_COLLECTION_AFTER = 100  # middle collections (CPython's default: 10)

log = logging.getLogger("firsttoken.server")

Handler = Callable[[Scope, Receive, Send, Headers, Timeline], Awaitable[None]]


class Gateway:
    def __init__(self, settings: Settings, cluster: Cluster | None = None) -> None:
        self.embedded: EmbeddedRegion | None = None
        simulated = settings.simulated
        region_description: str | None = None
        if simulated is not None:
            shared_region = os.environ.get(SHARED_REGION_ENV)
            if cluster is not None and shared_region:
                region_url = shared_region
                region_description = describe_region(
                    simulated, f"in a process of its own, shared by the gateway's {cluster.size} workers")
            else:
                self.embedded = EmbeddedRegion(simulated)
                region_url, region_description = self.embedded.url, self.embedded.description
            settings = settings.with_upstream(SIM_UPSTREAM, {"url": region_url, "api": "openai",
                                                             "region": simulated.region})
            if settings.location is None:  # the gateway stands where the region's clients are
                settings = settings.model_copy(update={"location": simulated.client_location})
        if cluster is not None:
            settings = cluster.shared_pools(settings)
        self.settings = settings
        secrets = settings.secrets()
        credentials = Redactor(secrets)
        redact_logs(secrets)  # whatever a library or we log, no credential of ours is in it
        self.alarms = Alarms()
        self.memory_trimmer = MemoryTrimmer()
        self.upstreams = upstreams = Upstreams(settings.upstreams, settings.place)
        self.router = router = Router(settings.routing, lambda upstream: upstreams[upstream].floor_ms)
        self.peers = Peers(cluster) if cluster is not None else None
        self.keep_warm = KeepWarm(router, upstreams,
                                  ClusterPings(cluster, self.peers) if cluster and self.peers else None)
        self.metrics = Metrics()
        self.sink = JourneySink(_journey_log(settings), self.metrics, _span_exporter(settings))
        if settings.journeys.redis:
            self.sink.shared = SharedJourneys(settings.journeys.redis, settings.journeys.recent)
        journeys = RecentJourneys(settings.journeys.recent)
        self.cache = EdgeCache(settings.cache) if settings.cache.enabled else None
        if self.cache is not None:
            self.metrics.registry.register(CacheCollector(self.cache))
        self.metrics.registry.register(RoutingCollector(router, self.keep_warm))
        self.metrics.registry.register(PoolCollector(upstreams))
        register_process_metrics(self.metrics.registry, self.alarms.lag)
        self.task_router = TaskRouter(settings.sizing) if settings.sizing is not None else None
        self.client_limits = ClientLimits(settings.keys, settings.limits.redis,
                                          fail_closed=settings.limits.redis_down == "closed",
                                          keeper=bucket_keeper(cluster, self.peers, settings)
                                          if cluster and self.peers else None)
        keys = ClientKeys(settings.keys, settings.admin_key)
        pricing = pricing_for(settings, SIM_UPSTREAM if simulated is not None else None)
        ledger = SpendLedger(settings.spend.log, settings.spend.max_age_days)
        budgets = Budgets(settings.keys, ledger, settings.spend.warn_at,
                          SharedSpend(settings.spend.redis) if settings.spend.redis and any(
                              k.budget for k in settings.keys) else None)
        self.spend = SpendMeter(pricing, ledger, budgets)
        admission = Admission(keys, self.client_limits, settings.limits, journeys, self.alarms, pricing, budgets)
        egress = Egress(upstreams, self.alarms, router)
        resolver = TargetResolver(settings, upstreams.listed_models)
        chat = Generation(admission, egress, resolver, self.task_router, self.cache, credentials,
                               settings.streaming)
        messages = Generation(admission, egress, resolver, self.task_router, self.cache, credentials,
                                   settings.streaming, MESSAGES)
        self.response_store = _response_store(settings)
        responses = Generation(admission, egress, resolver, self.task_router, self.cache, credentials,
                                    settings.streaming, ResponsesFormat(self.response_store))
        catalog = Catalog(admission, egress, resolver, settings.streaming,
                          region_description,
                          settings.dashboard.enabled)
        views = WorkerViews(journeys, self.sink, self.metrics, router, self.keep_warm)
        self.peer_server = PeerServer(cluster, views, self.client_limits) if cluster is not None else None
        ops = Ops(keys, views, upstreams, self.peers, self.sink.shared)
        self.client_rtt = RttReader()
        self.cors = Cors(settings.cors.origins) if settings.cors is not None else None
        self.access_log = settings.listen.access_log
        # request ids: a per-process random prefix and a counter; unique without a syscall per request
        self._id_prefix = os.urandom(6).hex().encode()
        self._ids = itertools.count(1)
        # Paths with and without the /v1 prefix: some clients are configured with a bare base URL.
        self.routes: dict[str, dict[str, Handler]] = {}
        for path, method, handler in (
            ("/chat/completions", "POST", chat),
            ("/messages", "POST", messages),
            ("/responses", "POST", responses),
            ("/embeddings", "POST", catalog.embeddings),
            ("/models", "GET", catalog.models),
        ):
            self.routes.setdefault(f"/v1{path}", {})[method] = handler
            self.routes.setdefault(path, {})[method] = handler
        count_tokens = CountTokens(admission, egress, resolver, settings.streaming)
        for path in ("/v1/messages/count_tokens", "/messages/count_tokens"):
            self.routes[path] = {"POST": count_tokens}
        self.routes["/v1/journeys"] = {"GET": ops.journey_list}
        self.routes["/v1/spend"] = {"GET": SpendRoute(keys, settings.spend.log, settings.keys)}
        self.routes["/v1/routing"] = {"GET": ops.routing}
        self.prefix_routes: dict[str, dict[str, Handler]] = {"/v1/journeys/": {"GET": ops.journey},
                                                            "/v1/models/": {"GET": catalog.model},
                                                            "/models/": {"GET": catalog.model}}
        # Errors in the route's own format: Anthropic's shape where Anthropic's SDKs are the clients.
        self.error_formats: dict[str, ClientFormat] = {
            path: MESSAGES for path in ("/v1/messages", "/messages", "/v1/messages/count_tokens",
                                        "/messages/count_tokens")}
        if settings.dashboard.enabled:
            self.sink.feed = JourneyFeed(BATCH_S)
            dashboard = Dashboard(settings, keys, journeys, self.sink.feed, router, self.keep_warm, upstreams)
            self.routes["/dashboard"] = {"GET": dashboard.page}
            self.routes["/dashboard/"] = {"GET": dashboard.page}
            for name, handler in (("auth", dashboard.auth), ("state", dashboard.state), ("recent", dashboard.recent),
                                  ("history", dashboard.history), ("events", dashboard.events)):
                self.routes[f"/dashboard/api/{name}"] = {"GET": handler}
            self.prefix_routes["/dashboard/assets/"] = {"GET": dashboard.asset}
            self.prefix_routes["/dashboard/api/journeys/"] = {"GET": dashboard.journey}
        self.routes["/openapi.json"] = {"GET": catalog.openapi}
        self.routes["/metrics"] = {"GET": ops.prometheus}
        self.routes["/healthz"] = {"GET": ops.healthz}
        self.routes["/readyz"] = {"GET": ops.readyz}

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
                    self.memory_trimmer.start()
                    self.sink.start()
                    self.spend.ledger.start()
                    if self.cache is not None:
                        await self.cache.start()  # the embedding model, when semantic caching is on
                    if self.embedded is not None:
                        await self.embedded.start()
                    await self.upstreams.start()
                    if self.peer_server is not None:
                        await self.peer_server.start()
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
                # A full collection walks every live object (about 140 per open stream) with the loop
                # stopped: 20–50 ms at 1 000 open streams. Considered after every 100 middle collections
                # rather than 10, it comes ten times less often. That holds only while requests leave no
                # cycles of their own: one that does keeps its answer for minutes (tests/server/
                # test_cyclic_garbage.py). docs/benchmarks.md, "Many long streams", has the p99 TTFT with
                # each setting.
                young, middle, _ = gc.get_threshold()
                gc.set_threshold(young, middle, FULL_COLLECTION_AFTER)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.keep_warm.close()
                if self.peer_server is not None:
                    await self.peer_server.close()
                if self.peers is not None:
                    await self.peers.close()
                await self.upstreams.close()
                if self.embedded is not None:
                    await self.embedded.close()
                await self.alarms.close()
                await self.memory_trimmer.close()
                self.sink.take_batch()
                await asyncio.to_thread(self.sink.close)  # the last journeys reach the log
                await asyncio.to_thread(self.spend.ledger.close)  # and the last requests' spend the ledger
                if self.cache is not None:
                    await self.cache.close()  # and the last answers the cache
                await self.client_limits.close()
                if self.spend.budgets.shared is not None:
                    await self.spend.budgets.shared.close()
                if self.sink.shared is not None:
                    await self.sink.shared.close()
                if self.response_store is not None:
                    self.response_store.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_id = b"req_%s%x" % (self._id_prefix, next(self._ids))
        timeline = Timeline(request_id.decode())
        timeline.client_rtt = self.client_rtt.rtt(client_transport(receive), timeline.received)
        base: Headers = [(b"x-request-id", request_id)]
        cors = self.cors
        origin = cors.allowed(scope) if cors is not None else None
        if cors is not None and origin is not None:
            if is_preflight(scope):
                await cors.preflight(scope, send, origin)
                return
            base += cors.headers(origin)
        if self.access_log:
            send = access_log.watching(send, timeline)
        methods = self.routes.get(scope["path"])
        if methods is None:
            methods = next((m for prefix, m in self.prefix_routes.items() if scope["path"].startswith(prefix)), None)
        try:
            if methods is None:
                raise GatewayError(404, f"No route {scope['path']}; this gateway serves /v1/chat/completions, "
                                        f"/v1/messages, /v1/responses, /v1/embeddings and /v1/models.",
                                   code="unknown_route")
            handler = methods.get(scope["method"])
            if handler is None:
                raise GatewayError(405, f"{scope['method']} is not allowed on {scope['path']}; use "
                                        f"{', '.join(methods)}.", code="method_not_allowed",
                                   headers={"allow": ", ".join(methods)})
            await handler(scope, receive, send, base, timeline)
        except GatewayError as error:
            timeline.status = error.status
            timeline.failed(error.code or error.type, error.message)
            await send_error(send, error, response_headers(base, timeline), self._error_format(scope).error_body)
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
                                 response_headers(base, timeline), self._error_format(scope).error_body)
            except Exception:
                pass
            timeline.status = 500
        finally:
            if timeline.tenant:  # a journey: it reached the point of being somebody's request
                timeline.last_byte = timeline.last_byte or perf_counter()
                if self.spend.record(timeline):
                    await self.spend.settle(timeline)
                self.sink.put(timeline)
            if self.access_log:
                access_log.record(scope, timeline)


    def _error_format(self, scope: Scope) -> ClientFormat:
        path = scope["path"]
        if path.startswith(("/v1/models", "/models")) and speaks_anthropic(scope):
            return MESSAGES
        return self.error_formats.get(path, CHAT)


def _journey_log(settings: Settings) -> JourneyLog | None:
    journeys = settings.journeys
    return JourneyLog(journeys.log, journeys.max_rows, journeys.max_age_days * 86400) if journeys.log else None


def _response_store(settings: Settings) -> ResponseStore | None:
    responses = settings.responses
    if responses.store is None:
        return None
    return ResponseStore(responses.store, responses.max_responses, responses.max_age_days * 86400)


def _span_exporter(settings: Settings) -> OtlpExporter | None:
    otlp = settings.journeys.otlp
    if otlp is None:
        return None
    return OtlpExporter(otlp.endpoint, {k: v.get_secret_value() for k, v in otlp.headers.items()}, otlp.service_name)


def create_app(settings: Settings) -> Gateway:
    return Gateway(settings)


def app_from_environment() -> Gateway:
    """The factory uvicorn calls in each worker: settings travel through the environment."""
    configure_logging()
    overrides: dict[str, object] = {}
    if os.environ.get("FIRSTTOKEN_HOST"):
        overrides["listen.host"] = os.environ["FIRSTTOKEN_HOST"]
    if os.environ.get("FIRSTTOKEN_PORT"):
        overrides["listen.port"] = int(os.environ["FIRSTTOKEN_PORT"])
    if os.environ.get("FIRSTTOKEN_ACCESS_LOG") == "1":
        overrides["listen.access_log"] = True
    settings = config_module.load(os.environ.get("FIRSTTOKEN_CONFIG") or None, overrides=overrides)
    return Gateway(settings, Cluster.from_environment())


__all__ = ["Gateway", "create_app", "app_from_environment"]

