"""Redis as a dependency that can freeze: a short timeout on every command, and a circuit breaker that stops
asking a Redis that did not answer.

The gateway's users of Redis (the edge cache, the client keys' rate limits) fail open: a Redis that is down
is a cache miss, a request let through. That alone is not enough. A frozen Redis (connections accepted,
nothing answered) would cost every request a whole socket timeout, and a stopped one a warning per request.
So every command gives up after `timeout_s` (0.1 s; the URL's own `socket_timeout` wins, as in redis-py's
`from_url`), and after one timeout or connection error the circuit opens: commands are skipped without
touching Redis for a cool-down (1 s, doubling up to 30 s while probes keep failing). When it ends, exactly
one command probes (the others go on skipping) and its success closes the circuit; nothing needs a restart.
Warnings are one line per `warn_every_s` with counts, plus one line when Redis is back, and the URL is never
logged with its userinfo or query (either may hold the password).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as redis
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

T = TypeVar("T")

# What says Redis is away (so the circuit opens), rather than that it answered with an error. redis-py wraps
# socket errors in its own, but an OSError that slips through means the same.
_OUTAGES = (RedisConnectionError, RedisTimeoutError, OSError)


@dataclass(frozen=True, slots=True)
class GuardPolicy:
    """How long to wait on Redis, and how long to leave it alone after it failed."""

    timeout_s: float = 0.1  # a command on a request's path; Redis answers in well under a millisecond nearby
    connect_timeout_s: float = 0.5  # a new connection (a TLS handshake to a managed Redis) may take longer
    cool_down_s: float = 1.0  # the first pause after a failure ...
    max_cool_down_s: float = 30.0  # ... doubled while probes keep failing, up to this
    warn_every_s: float = 10.0  # at most one warning line per this long


DEFAULT_POLICY = GuardPolicy()


class RedisGuard:
    """One Redis, its clients, and the circuit every command to it goes through."""

    def __init__(self, url: str, what: str, fallback: str, log: logging.Logger,
                 policy: GuardPolicy = DEFAULT_POLICY) -> None:
        self.what = what  # who uses Redis ("edge cache"), for the log lines
        self.fallback = fallback  # what its users do meanwhile ("requests are let through")
        self.where = redacted(url)
        self.policy = policy
        self._url = url
        self._log = log
        # The URL's own socket_timeout wins over the policy's, as it does in from_url.
        given = parse_url(url).get("socket_timeout")
        self.timeout_s = float(given) if isinstance(given, int | float) and given > 0 else policy.timeout_s
        self.skipped = 0  # commands not sent because the circuit was open, since the start
        self.failed = 0  # commands that failed, since the start
        self._open_until: float | None = None  # None: the circuit is closed
        self._opened_at = 0.0
        self._cool_down_s = policy.cool_down_s
        self._probing = False
        self._last_error = ""
        self._warned_at = -float("inf")
        self._reported = (0, 0)  # skipped, failed as of the last line

    def client(self, blocking_s: float = 0.0) -> redis.Redis:
        """A client whose commands give up after the timeout, plus `blocking_s` for a client whose commands
        wait on the server by design (XREAD BLOCK)."""
        # redis-py retries once, at once, on a connection error only: a pooled connection that Redis closed
        # (a restart, its idle `timeout`) fails its next command, and that is no outage. A timeout is never
        # retried (a frozen Redis would cost it twice): the circuit decides when to ask again.
        client = redis.Redis.from_url(self._url, socket_timeout=self.policy.timeout_s,
                                      socket_connect_timeout=self.policy.connect_timeout_s,
                                      retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)))
        if blocking_s:  # over the URL's own timeout too: a blocking read must outlast its block
            client.get_connection_kwargs()["socket_timeout"] = self.timeout_s + blocking_s
        return client

    @property
    def is_open(self) -> bool:
        """Whether Redis is being skipped (it failed, and no probe has found it back yet)."""
        return self._open_until is not None

    def retry_in_s(self) -> float:
        """How long until the next probe may go (0 when the circuit is closed or a probe is due)."""
        return 0.0 if self._open_until is None else max(0.0, self._open_until - time.monotonic())

    async def call(self, command: Callable[[], Awaitable[T]]) -> T | None:
        """The command's result; None when Redis was skipped (the circuit is open) or failed (counted, and
        warned about at most once per interval), so that the caller falls back."""
        now = time.monotonic()
        probe = False
        if self._open_until is not None:
            if now < self._open_until or self._probing:
                self.skipped += 1
                self._warn_if_due(now)
                return None
            self._probing = probe = True  # the cool-down is over: this command is the one that tries
        try:
            result = await command()
        except _OUTAGES as exc:
            self._failed(exc, probe)
            return None
        except RedisError as exc:  # it answered, with an error (a script's, out of memory): not an outage
            self._answered(probe)
            self._failed(exc, probe=False, outage=False)
            return None
        finally:
            if probe:  # also when the probe was cancelled: the next command probes instead
                self._probing = False
        self._answered(probe)
        return result

    def _answered(self, probe: bool) -> None:
        # Only a probe closes the circuit: an answer to a command sent before it opened says nothing new.
        if not probe or self._open_until is None:
            return
        now = time.monotonic()
        skipped, failed = self._since_last_line()
        self._log.warning("%s: Redis at %s is back after %.1f s; %d operations skipped and %d failed since the "
                          "last line", self.what, self.where, now - self._opened_at, skipped, failed)
        # The warning clock runs on: a Redis that flaps still gets one failure line per interval.
        self._open_until = None
        self._cool_down_s = self.policy.cool_down_s

    def _failed(self, exc: BaseException, probe: bool, outage: bool = True) -> None:
        now = time.monotonic()
        self.failed += 1
        self._last_error = f"{type(exc).__name__}: {exc}"
        if outage and self._open_until is None:
            self._opened_at = now
            self._cool_down_s = self.policy.cool_down_s
            self._open_until = now + self._cool_down_s
        elif outage and probe:
            self._cool_down_s = min(self._cool_down_s * 2, self.policy.max_cool_down_s)
            self._open_until = now + self._cool_down_s
        self._warn_if_due(now)

    def _warn_if_due(self, now: float) -> None:
        if now - self._warned_at < self.policy.warn_every_s:
            return
        self._warned_at = now
        skipped, failed = self._since_last_line()
        if self._open_until is None:
            self._log.warning("%s: Redis at %s answered with an error (%s); %d operations failed since the last "
                              "line; %s", self.what, self.where, self._last_error, failed, self.fallback)
        else:
            self._log.warning("%s: Redis at %s unavailable (%s); %d operations skipped and %d failed since the last "
                              "line; %s; next try in %.1f s", self.what, self.where, self._last_error, skipped, failed,
                              self.fallback, self._open_until - now)

    def _since_last_line(self) -> tuple[int, int]:
        skipped, failed = self.skipped - self._reported[0], self.failed - self._reported[1]
        self._reported = (self.skipped, self.failed)
        return skipped, failed


def redacted(url: str) -> str:
    """The URL fit for a log line: without userinfo or query, either of which may hold the password."""
    parts = urlsplit(url)
    user, at, host = parts.netloc.rpartition("@")
    return urlunsplit((parts.scheme, ("***@" if at else "") + host, parts.path, "", ""))
