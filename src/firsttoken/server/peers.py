"""The workers of one gateway talking among themselves, over Unix sockets in the supervisor's private run
directory (server/cluster.py): each worker answers for itself (PeerServer), and asks its siblings when a
request wants all of them (Peers).

Nothing here is reachable from the network, and the run directory is the gateway's user's alone, so the
tenant a journey lookup is limited to is taken as the asking worker says it: that worker checked the key.
A sibling that does not answer within PEER_TIMEOUT_S (it is being replaced after a crash) is left out, and
the answer says how many workers it covers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from firsttoken.config import Settings
from firsttoken.routing.client_limits import ClientLimits, KeeperUnreachable
from firsttoken.routing.ratelimit import Refusal
from firsttoken.server.cluster import Cluster
from firsttoken.server.worker_views import TimedJourney, WorkerViews

PEER_TIMEOUT_S = 2.0

log = logging.getLogger("firsttoken.peers")


def _tenant(request: web.Request) -> str | None:
    return request.query.get("tenant")


class PeerServer:
    """This worker's views, for its siblings."""

    def __init__(self, cluster: Cluster, views: WorkerViews, limits: ClientLimits) -> None:
        self.cluster = cluster
        self.views = views
        self.limits = limits
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/journeys", self._latest)
        app.router.add_get("/journeys/{request_id}", self._journey)
        app.router.add_get("/routing", self._routing)
        app.router.add_get("/idle", self._idle)
        app.router.add_post("/limits/take", self._take)  # asked of the keeper only (bucket_keeper)
        app.router.add_post("/limits/settle", self._settle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        path = self.cluster.socket_path(self.cluster.slot)
        path.unlink(missing_ok=True)  # left by the worker this one replaces
        await web.UnixSite(self._runner, str(path)).start()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.views.exposition(), content_type="text/plain")

    async def _latest(self, request: web.Request) -> web.Response:
        limit = int(request.query.get("limit", "20"))
        return web.json_response(self.views.latest(limit, _tenant(request)))

    async def _journey(self, request: web.Request) -> web.Response:
        found = self.views.journey(request.match_info["request_id"], _tenant(request))
        return web.json_response(found, status=200 if found is not None else 404)

    async def _routing(self, request: web.Request) -> web.Response:
        return web.json_response(self.views.routing())

    async def _idle(self, request: web.Request) -> web.Response:
        return web.json_response({"idle_s": self.views.idle_s(request.query["target"])})

    async def _take(self, request: web.Request) -> web.Response:
        asked = await request.json()
        refusal = self.limits.take_here(asked["key"], asked["tokens"])
        return web.json_response({"refusal": None if refusal is None else dataclasses.asdict(refusal)})

    async def _settle(self, request: web.Request) -> web.Response:
        asked = await request.json()
        self.limits.settle_here(asked["key"], asked["charged"], asked["used"])
        return web.json_response({})


class Peers:
    """This worker's siblings, asked all at once."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._sessions: dict[int, aiohttp.ClientSession] = {}

    async def close(self) -> None:
        await asyncio.gather(*(session.close() for session in self._sessions.values()))

    def _session(self, slot: int) -> aiohttp.ClientSession:
        session = self._sessions.get(slot)
        if session is None:
            connector = aiohttp.UnixConnector(path=str(self.cluster.socket_path(slot)))
            session = aiohttp.ClientSession(connector=connector,
                                            timeout=aiohttp.ClientTimeout(total=PEER_TIMEOUT_S))
            self._sessions[slot] = session
        return session

    async def _ask(self, slot: int, path: str, params: dict[str, str], as_json: bool) -> Any:
        """A sibling's answer; None when it has none (404) or cannot answer now."""
        try:
            async with self._session(slot).get(f"http://worker{path}", params=params) as response:
                if response.status == 404:
                    return None
                response.raise_for_status()
                return await (response.json() if as_json else response.text())
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            log.info("worker %d did not answer %s: %s", slot, path, exc)
            return _MISSING

    async def gather(self, path: str, params: dict[str, str] | None = None,
                     as_json: bool = True) -> dict[int, Any]:
        """Each sibling's answer that came, by slot."""
        slots = self.cluster.siblings
        answers = await asyncio.gather(*(self._ask(slot, path, params or {}, as_json) for slot in slots))
        return {slot: answer for slot, answer in zip(slots, answers, strict=True) if answer is not _MISSING}

    async def expositions(self) -> dict[int, str]:
        return await self.gather("/metrics", as_json=False)

    async def latest(self, limit: int, tenant: str | None) -> dict[int, list[TimedJourney]]:
        return await self.gather("/journeys", _params(limit=str(limit), tenant=tenant))

    async def journey(self, request_id: str, tenant: str | None) -> dict[str, Any] | None:
        answers = await self.gather(f"/journeys/{request_id}", _params(tenant=tenant))
        return next((found for found in answers.values() if found is not None), None)

    async def routing(self) -> dict[int, list[dict[str, Any]]]:
        return await self.gather("/routing")

    async def post(self, slot: int, path: str, body: dict[str, Any]) -> Any:
        """A sibling's JSON answer; KeeperUnreachable when it gives none."""
        try:
            async with self._session(slot).post(f"http://worker{path}", json=body) as response:
                response.raise_for_status()
                return await response.json()
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            raise KeeperUnreachable(f"worker {slot} did not answer {path}: {exc}") from exc

    async def idle_s(self, label: str) -> list[float]:
        """How long each sibling that has used the target has left it idle."""
        answers = await self.gather("/idle", {"target": label})
        return [a["idle_s"] for a in answers.values() if a is not None and a["idle_s"] is not None]


_MISSING = object()
KEEPER_SLOT = 0  # the worker that keeps the client keys' buckets, when no Redis does


def bucket_keeper(cluster: Cluster, peers: Peers, settings: Settings) -> KeeperBuckets | None:
    """Where this worker's client keys' buckets are kept: in the keeper worker, when keys have limits and
    no Redis keeps them and this is not the keeper; None where they are kept here or in Redis."""
    limited = any(key.rpm is not None or key.tpm is not None for key in settings.keys)
    if not limited or settings.limits.redis or cluster.slot == KEEPER_SLOT:
        return None
    return KeeperBuckets(peers)


class KeeperBuckets:
    """The client keys' buckets as the keeper worker keeps them (routing/client_limits.py's BucketKeeper),
    for the other workers: one request to it per limited request, about the cost of a Redis command."""

    def __init__(self, peers: Peers) -> None:
        self.peers = peers

    async def take(self, key: str, tokens: int) -> Refusal | None:
        answer = await self.peers.post(KEEPER_SLOT, "/limits/take", {"key": key, "tokens": tokens})
        refusal = answer["refusal"]
        return None if refusal is None else Refusal(**refusal)

    async def settle(self, key: str, charged: int, used: int) -> None:
        await self.peers.post(KEEPER_SLOT, "/limits/settle", {"key": key, "charged": charged, "used": used})


def _params(**values: str | None) -> dict[str, str]:
    return {name: value for name, value in values.items() if value is not None}


class ClusterPings:
    """Keep-warm pings under `--workers N` (routing/keepwarm.py's PingGate): one worker pings at a time,
    holding the cluster's ping lock, and only a model that no sibling has used within the idle spell; the
    sibling that pinged has its own idle spell started again by the ping, so the others see it as used.
    A worker that finds the lock held does nothing this tick: the holder's ping, if it goes, is seen by
    asking again."""

    def __init__(self, cluster: Cluster, peers: Peers) -> None:
        self.cluster = cluster
        self.peers = peers

    async def run(self, label: str, idle_s: float, ping: Callable[[], Awaitable[None]]) -> float | None:
        lock = self.cluster.ping_lock()
        if lock is None:
            return None
        try:
            used_s_ago = min(await self.peers.idle_s(label), default=None)
            if used_s_ago is not None and used_s_ago < idle_s:
                return used_s_ago
            await ping()
            return None
        finally:
            self.cluster.unlock(lock)
