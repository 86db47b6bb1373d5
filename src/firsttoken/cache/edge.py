"""The edge cache's policy: which requests may be answered from it and which answers may go into it.

Per request, the standard `Cache-Control` request header is honoured: `no-cache` asks the upstream
but keeps its answer, `no-store` may be answered from the cache but keeps nothing. `x-firsttoken-cache`
says it shorter: `off` (neither), `refresh` (as no-cache), `force` (both, even for a model whose
policy turns the cache off). Per model (an alias, or `upstream/model`), the config sets the TTL, 0 for
no caching. Answers are only kept when they finished cleanly (the forwarders decide that) and the
upstream did not mark them `no-store` or `private`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from firsttoken.cache.entry import Entry, Kind
from firsttoken.cache.key import exact_key
from firsttoken.cache.redis_store import RedisStore
from firsttoken.cache.stores import MemoryStore, SqliteStore, Store
from firsttoken.config import Cache
from firsttoken.errors import bad_request

_OPT = b"x-firsttoken-cache"


@dataclass(slots=True)
class Lookup:
    """What the cache says of one request: the answer it has, and whether a fresh one may be kept."""

    key: str
    hit: Entry | None
    read: bool  # may be answered by a stored answer, or by an identical request in flight
    keep: bool
    tenant: str
    ttl: float


class EdgeCache:
    def __init__(self, settings: Cache) -> None:
        self.settings = settings
        self.store = open_store(settings)

    async def lookup(self, headers: Sequence[tuple[bytes, bytes]], tenant: str, model: str, targets: Sequence[str],
               body: dict[str, Any]) -> Lookup | None:
        """None when this request neither reads nor writes the cache."""
        read, write, forced = _request_policy(headers)
        ttl = self.settings.models.get(model, self.settings.ttl)
        if not (read or write) or (ttl <= 0 and not forced):
            return None
        ttl = ttl if ttl > 0 else self.settings.ttl
        owner = "*" if self.settings.shared else tenant
        key = exact_key(owner, targets, body)
        return Lookup(key, await self.store.get(key, time.time()) if read else None, read, write, owner, ttl)

    def keep(self, lookup: Lookup, kind: Kind, body: bytes, route: str,
             upstream_headers: Any = None) -> None:
        """A clean answer from the upstream, unless it asked not to be stored."""
        if not lookup.keep:
            return
        if upstream_headers is not None:
            control = upstream_headers.get("Cache-Control", "").lower()
            if "no-store" in control or "private" in control:
                return
        now = time.time()
        self.store.put(lookup.key, Entry(kind, body, lookup.tenant, route, now, now + lookup.ttl))

    async def close(self) -> None:
        await self.store.close()


def open_store(settings: Cache) -> Store:
    """The store the config names (not `none`: no store at all)."""
    if settings.backend == "memory":
        return MemoryStore(settings.max_bytes)
    if settings.backend == "redis":
        assert settings.url is not None  # the config requires it
        return RedisStore(settings.url, settings.max_bytes, settings.prefix)
    return SqliteStore(settings.path, settings.max_bytes)


def _request_policy(headers: Sequence[tuple[bytes, bytes]]) -> tuple[bool, bool, bool]:
    """(read, write, forced) from the request's headers."""
    read = write = True
    forced = False
    for name, value in headers:
        if name == b"cache-control":
            directives = {d.strip() for d in value.lower().split(b",")}
            if b"no-cache" in directives:
                read = False
            if b"no-store" in directives:
                write = False
        elif name == _OPT:
            choice = value.strip().lower()
            if choice == b"off":
                read = write = False
            elif choice == b"refresh":
                read = False
            elif choice == b"force":
                forced = True
            else:
                raise bad_request(f"x-firsttoken-cache: {value.decode(errors='replace')!r} is not one of off, "
                                  f"refresh, force.", param="x-firsttoken-cache", code="invalid_header")
    return read, write, forced
