"""The warm pool: one keep-alive connection pool per upstream, opened at start-up and kept warm.

A client request should never pay DNS + TCP + TLS across an ocean. The pool opens `pool.warm`
connections before the gateway reports ready, and every `pool.refresh_s` it exercises again, with a
cheap request, those that traffic left idle for half that time, so neither side's keep-alive timer
expires; sooner when the upstream says (`Keep-Alive: timeout=N`) that it closes idle connections sooner.
Connections that traffic keeps busy are left to it: a probe holds its connection for a round trip across
the ocean, and a request that found every connection held by a probe would pay a handshake (measured:
a refresh of every warm connection at once under steady traffic cost a few requests in each round a new
TCP connection, 180 ms, docs/architecture.md "`firsttoken plan`"). aiohttp owns the sockets; this module
owns when they are opened and what they cost.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from dataclasses import dataclass, field

import aiohttp

from firsttoken.config import Upstream
from firsttoken.upstream.connector import TimedConnector

log = logging.getLogger("firsttoken.pool")


@dataclass
class PoolState:
    warm: bool = False
    attempted: bool = False
    last_error: str | None = None
    connections_opened: int = 0
    models: list[str] = field(default_factory=list)
    upstream_keepalive_s: float | None = None  # from the upstream's Keep-Alive header, when it sends one


class WarmPool:
    """The connections to one upstream and the task that keeps them warm."""

    def __init__(self, name: str, settings: Upstream, probe: tuple[str, dict[str, str]]) -> None:
        self.name = name
        self.settings = settings
        self.probe_url, self.probe_headers = probe
        self.state = PoolState()
        self.session: aiohttp.ClientSession | None = None
        self.connector: TimedConnector | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._releasing: dict[aiohttp.ClientResponse, asyncio.Task[None]] = {}
        self._problem: str | None = None  # what the current warm-up round's probes reported

    async def start(self) -> None:
        pool = self.settings.pool
        tls: ssl.SSLContext | bool = True
        if self.settings.ca_file:
            tls = ssl.create_default_context(cafile=self.settings.ca_file)
        self.connector = connector = TimedConnector(
            self.name, ssl=tls, limit=pool.max, limit_per_host=pool.max, keepalive_timeout=pool.keepalive_s,
            ttl_dns_cache=300, enable_cleanup_closed=True,
        )
        self.session = aiohttp.ClientSession(
            connector=connector,
            # sock_connect, not connect: aiohttp arms a `connect` timer even when a pooled connection is
            # reused; the request's own deadline (alarms.py) bounds the wait for a free connection.
            timeout=aiohttp.ClientTimeout(total=None, connect=None, sock_connect=self.settings.timeouts.connect,
                                          sock_read=None),
            # We ask for identity. An upstream that compresses anyway is decoded: our own response never
            # carries its Content-Encoding, so passing its bytes on would hand the client gzip as text.
            auto_decompress=True,
            skip_auto_headers=("User-Agent",),
        )
        self._refresher = asyncio.create_task(self._keep_warm(), name=f"warm:{self.name}")

    async def close(self) -> None:
        tasks = [t for t in (self._refresher, *self._releasing.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.session is not None:
            await self.session.close()

    def release_later(self, response: aiohttp.ClientResponse) -> None:
        """Give a finished stream's connection back once its last bytes (the end of the chunked body,
        after `[DONE]`) are read, instead of closing it half-read; off the request's own path."""
        if response.content.is_eof():  # usually the end came in the same read as [DONE]
            response.release()
            return
        if len(self._releasing) >= self.settings.pool.max:  # a bound: close rather than queue
            response.close()
            return
        task = asyncio.get_running_loop().create_task(self._drain(response))
        self._releasing[response] = task
        task.add_done_callback(lambda _t: self._releasing.pop(response, None))

    def releasing(self, response: aiohttp.ClientResponse) -> bool:
        return response in self._releasing

    async def _drain(self, response: aiohttp.ClientResponse) -> None:
        try:
            async with asyncio.timeout(self.settings.timeouts.connect):
                while await response.content.readany():
                    pass
            response.release()
        except (TimeoutError, aiohttp.ClientError, OSError):
            response.close()
        except asyncio.CancelledError:
            response.close()
            raise

    async def warm(self) -> None:
        """Open the warm connections that are missing and exercise those left idle, at once: concurrent
        probes take one each, the longest idle first."""
        wanted = self.settings.pool.warm
        if wanted == 0 or self.session is None or self.connector is None:
            self.state.attempted = True
            self.state.warm = wanted == 0
            return
        count = probes_needed(wanted, self.connector.in_use, self.connector.idle_for(), self.refresh_interval() / 2)
        if count == 0 and self.state.warm:  # traffic keeps every one of them fresh
            return
        count = count or wanted  # not warm yet: try them all again
        self._problem = None
        results = await asyncio.gather(*(self._probe() for _ in range(count)), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        self.state.connections_opened += sum(1 for r in results if r is True)
        self.state.attempted = True
        self.state.warm = len(errors) < count
        self.state.last_error = _describe(errors[0]) if errors else self._problem  # this round's, not stale
        if not self.state.warm:
            log.warning("upstream %s: could not open a warm connection: %s", self.name, self.state.last_error)

    async def _probe(self) -> bool:
        """One cheap request on a pooled connection; True when it had to open a new one."""
        assert self.session is not None and self.connector is not None
        async with self.session.get(self.probe_url, headers=self.probe_headers, allow_redirects=False,
                                    timeout=aiohttp.ClientTimeout(total=self.settings.timeouts.connect * 2)) as resp:
            opened = self.connector.handshake(resp) is not None
            if match := _KEEPALIVE_TIMEOUT.search(resp.headers.get("Keep-Alive", "")):
                self.state.upstream_keepalive_s = float(match.group(1))
            body = await resp.read()
            if resp.status == 200 and not self.state.models:
                self.state.models = _model_ids(body)
            elif resp.status in (401, 403):
                self._problem = f"the upstream refused the key (HTTP {resp.status})"
        return opened

    def refresh_interval(self) -> float:
        """Seconds until the next refresh: before either side's idle timer can close a connection."""
        interval = min(self.settings.pool.refresh_s, self.settings.pool.keepalive_s * 0.8)
        if self.state.upstream_keepalive_s:
            interval = min(interval, max(self.state.upstream_keepalive_s * 0.8, 0.5))
        return interval if self.state.warm else min(interval, 5.0)

    async def _keep_warm(self) -> None:
        try:
            while True:
                await self.warm()
                await asyncio.sleep(self.refresh_interval())
        except asyncio.CancelledError:
            raise
        except Exception:  # the warmer must never die silently; log and let readiness show it
            log.exception("upstream %s: keep-warm task failed", self.name)
            self.state.warm = False


def probes_needed(warm: int, in_use: int, idle_for: list[float], stale_after_s: float) -> int:
    """How many probes a refresh round sends at once. Fewer than `warm` open: one for every idle connection
    and one for each missing, since a probe takes an idle connection before it opens one. Otherwise one for
    each idle connection traffic has not used for `stale_after_s` (the longest idle are taken first, so
    the probes reach exactly those): connections in use are fresh, so are the recently given back."""
    if in_use + len(idle_for) < warm:
        return warm - in_use
    return min(sum(1 for seconds in idle_for if seconds >= stale_after_s), warm)


_KEEPALIVE_TIMEOUT = re.compile(r"timeout=(\d+(?:\.\d+)?)")


def _model_ids(body: bytes) -> list[str]:
    import orjson

    try:
        data = orjson.loads(body).get("data", [])
        return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]
    except (orjson.JSONDecodeError, AttributeError, TypeError):
        return []


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
