"""Recent journeys in Redis (`journeys.redis`), shared by the replicas of a gateway, so that any replica
answers GET /v1/journeys and /v1/journeys/{id} for all of them: a client that sent a request through a
load balancer can look its journey up through the same balancer.

Each journey is kept as its JSON under its id, with a time to live, and listed by time in a sorted set for
the gateway and one per tenant, trimmed to `recent` entries. A batch of finished journeys is one pipeline
(one round trip), sent from the event loop as the sink takes its batch; the work per journey is its
attribution and its JSON, paid only when journeys are shared. Redis goes through the gateway's RedisGuard:
while it is away, journeys are this process's (the operator's routes fall back to what the workers hold)
and those that finished meanwhile are not shared.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from functools import partial
from typing import Any

import orjson

from firsttoken.journey.attribution import attribute
from firsttoken.journey.timeline import Timeline
from firsttoken.redis_guard import DEFAULT_POLICY, GuardPolicy, RedisGuard

log = logging.getLogger("firsttoken.journeys")

DEFAULT_TTL_S = 24 * 3600


class SharedJourneys:
    def __init__(self, url: str, recent: int, ttl_s: float = DEFAULT_TTL_S, prefix: str = "firsttoken:journeys:",
                 policy: GuardPolicy = DEFAULT_POLICY) -> None:
        self.guard = RedisGuard(url, "shared journeys", "each replica shows its own journeys", log, policy)
        self._redis = self.guard.client()
        self.recent = recent
        self.ttl_s = max(1, int(ttl_s))
        self._prefix = prefix
        self._sending: set[asyncio.Task[None]] = set()

    def publish(self, batch: Sequence[Timeline], wall_now: float, now: float) -> None:
        """Share a batch of finished journeys (on the event loop; sent in the background)."""
        kept = [t for t in batch if t.tenant]
        if not kept:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # the last batch, taken while the gateway stops: not shared
            return
        task = loop.create_task(self._send(kept, wall_now, now))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[Timeline], wall_now: float, now: float) -> None:
        pipe = self._redis.pipeline(transaction=False)
        lists: set[str] = set()
        for timeline in batch:
            at = wall_now - (now - timeline.received)
            pipe.set(self._journey_key(timeline.request_id), orjson.dumps(attribute(timeline).to_dict()),
                     ex=self.ttl_s)
            for listed in (self._list_key(None), self._list_key(timeline.tenant)):
                pipe.zadd(listed, {timeline.request_id: at})
                lists.add(listed)
        for listed in lists:
            pipe.zremrangebyrank(listed, 0, -self.recent - 1)
            pipe.expire(listed, self.ttl_s)
        await self.guard.call(pipe.execute)

    async def latest(self, limit: int, tenant: str | None) -> list[dict[str, Any]] | None:
        """Up to `limit` journeys of every replica, newest first; None when Redis cannot say now."""
        ids = await self.guard.call(partial(self._redis.zrevrange, self._list_key(tenant), 0, limit - 1))
        if ids is None:
            return None
        if not ids:
            return []
        keys = [self._journey_key(i.decode() if isinstance(i, bytes) else str(i)) for i in ids]
        found = await self.guard.call(partial(self._redis.mget, keys))
        if found is None:
            return None
        return [orjson.loads(journey) for journey in found if journey is not None]

    async def get(self, request_id: str, tenant: str | None) -> dict[str, Any] | None:
        """The journey if some replica shared it and `tenant` may see it (None: every tenant's)."""
        found = await self.guard.call(partial(self._redis.get, self._journey_key(request_id)))
        if found is None:
            return None
        journey: dict[str, Any] = orjson.loads(found)
        return journey if tenant is None or journey.get("tenant") == tenant else None

    async def close(self) -> None:
        if self._sending:
            await asyncio.wait(self._sending, timeout=1.0)  # the last batch, when Redis answers
        await self._redis.aclose()

    def _journey_key(self, request_id: str) -> str:
        return f"{self._prefix}id:{request_id}"

    def _list_key(self, tenant: str | None) -> str:
        return f"{self._prefix}all" if tenant is None else f"{self._prefix}tenant:{tenant}"

