"""Requests and tokens per minute for each client key, answered with 429, Retry-After and an
OpenAI-format error when exceeded.

Tokens are estimated when a request arrives (its messages' words, plus the answer's max_tokens) and
corrected from the answer's usage. The buckets live in this process (routing/ratelimit.py), or in Redis
when several gateways serve the same keys, or in the first worker of `serve --workers N` when there is
no Redis (the others ask it, server/peers.py). In Redis one Lua script refills and charges every bucket of a
request atomically, on Redis's clock, so replicas cannot overspend a key between them. The limiter must
not take the gateway down, nor slow it: every command goes through a RedisGuard (redis_guard.py), with a
short timeout and a circuit breaker. A Redis that is stopped or frozen lets requests through, uncounted
(corrections are dropped), or, with `limits.redis_down: closed`, refuses limited keys' requests with a 503
until it is back; once one command has failed, the others skip Redis without touching it until a
probe finds it back, and the warnings are a line per interval, not one per request.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from firsttoken.config import ClientKey
from firsttoken.errors import GatewayError
from firsttoken.journey.timeline import Timeline
from firsttoken.redis_guard import DEFAULT_POLICY, GuardPolicy, RedisGuard
from firsttoken.routing.ratelimit import KeyLimits, Refusal

log = logging.getLogger("firsttoken.limits")

# KEYS: the buckets. ARGV: capacity and cost of each, in turn. Returns {"0"} when charged, else
# {seconds to wait, the refusing bucket's position}; a cost above the capacity waits forever ("inf").
_TAKE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1e6
local levels, worst, worst_at = {}, 0, 0
for i = 1, #KEYS do
  local capacity, cost = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local saved = redis.call('HMGET', KEYS[i], 'level', 'updated')
  local level = tonumber(saved[1]) or capacity
  local updated = tonumber(saved[2]) or now
  level = math.min(capacity, level + (now - updated) * capacity / 60)
  levels[i] = level
  if cost > capacity then return {'inf', tostring(i)} end
  if level < cost and (cost - level) * 60 / capacity > worst then
    worst, worst_at = (cost - level) * 60 / capacity, i
  end
end
if worst > 0 then return {tostring(worst), tostring(worst_at)} end
for i = 1, #KEYS do
  redis.call('HSET', KEYS[i], 'level', tostring(levels[i] - tonumber(ARGV[2 * i])), 'updated', tostring(now))
  redis.call('EXPIRE', KEYS[i], 120)
end
return {'0'}
"""

# KEYS: a tokens bucket. ARGV: its capacity, the tokens to give back (negative: to charge).
_SETTLE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1e6
local capacity, delta = tonumber(ARGV[1]), tonumber(ARGV[2])
local saved = redis.call('HMGET', KEYS[1], 'level', 'updated')
local level = tonumber(saved[1]) or capacity
local updated = tonumber(saved[2]) or now
level = math.min(capacity, level + (now - updated) * capacity / 60 + delta)
redis.call('HSET', KEYS[1], 'level', tostring(level), 'updated', tostring(now))
redis.call('EXPIRE', KEYS[1], 120)
return 0
"""


class KeeperUnreachable(Exception):
    """The process that keeps the buckets did not answer."""


class BucketKeeper(Protocol):
    """Buckets kept by another process of this gateway."""

    async def take(self, key: str, tokens: int) -> Refusal | None: ...

    async def settle(self, key: str, charged: int, used: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Charge:
    """What one admitted request was charged, to be corrected from its usage."""

    key: str
    tokens: int


class ClientLimits:
    def __init__(self, keys: list[ClientKey], redis_url: str | None = None, prefix: str = "firsttoken:limits:",
                 policy: GuardPolicy = DEFAULT_POLICY, fail_closed: bool = False,
                 keeper: BucketKeeper | None = None) -> None:
        self._limits = {k.name: KeyLimits(k.rpm, k.tpm) for k in keys if k.rpm is not None or k.tpm is not None}
        self.fail_closed = fail_closed
        meanwhile = ("limited keys' requests are refused (503)" if fail_closed
                     else "requests are let through, uncounted")
        self.guard = (RedisGuard(redis_url, "rate limits", meanwhile, log, policy)
                      if redis_url and self._limits else None)
        self._redis = self.guard.client() if self.guard else None
        self._take = self._redis.register_script(_TAKE) if self._redis else None
        self._settle = self._redis.register_script(_SETTLE) if self._redis else None
        self._prefix = prefix
        self.keeper = keeper if self._redis is None else None

    def __bool__(self) -> bool:
        return bool(self._limits)

    async def admit(self, key: str, body: dict[str, Any]) -> Charge | None:
        """Charge one request to `key`, or raise the 429 that says which limit and for how long."""
        limits = self._limits.get(key)
        if limits is None:
            return None
        tokens = estimate_tokens(body)
        if self._redis is not None:
            refusal = await self._take_shared(key, limits, tokens)
        elif self.keeper is not None:
            refusal = await self._take_kept(key, tokens)
        else:
            refusal = limits.take(key, tokens, time.monotonic())
        if refusal is not None:
            raise _too_many(key, refusal)
        return Charge(key, tokens)

    async def settle(self, charge: Charge | None, used: int | None) -> None:
        """The request's real token count (usage), once known."""
        if charge is None or used is None:
            return
        limits = self._limits[charge.key]
        if self.keeper is not None:
            with contextlib.suppress(KeeperUnreachable):  # dropped: the bucket refills within a minute anyway
                await self.keeper.settle(charge.key, charge.tokens, used)
        elif self._redis is None:
            limits.settle(charge.key, charge.tokens, used, time.monotonic())
        elif limits.tpm is not None and used != charge.tokens:
            assert self.guard is not None and self._settle is not None
            # A correction Redis misses is dropped: the bucket refills within a minute anyway.
            await self.guard.call(partial(self._settle, keys=[self._bucket(charge.key, "tokens")],
                                          args=[limits.tpm, charge.tokens - used]))

    async def _take_shared(self, key: str, limits: KeyLimits, tokens: int) -> Refusal | None:
        checks = [(limit, allowed, cost) for limit, allowed, cost in
                  (("requests", limits.rpm, 1), ("tokens", limits.tpm, tokens)) if allowed is not None]
        args: list[int] = []
        for _, allowed, cost in checks:
            args += [allowed, cost]
        assert self.guard is not None and self._take is not None
        reply = await self.guard.call(partial(self._take, keys=[self._bucket(key, limit) for limit, _, _ in checks],
                                              args=args))
        if reply is None and self.fail_closed:
            raise _uncounted(key, "the gateway's Redis is unreachable")
        if reply is None or reply[0] == b"0":  # charged; or Redis failed or is skipped: let through
            return None
        limit, allowed, _ = checks[int(reply[1]) - 1]
        return Refusal(limit, allowed, float(reply[0]))

    async def _take_kept(self, key: str, tokens: int) -> Refusal | None:
        assert self.keeper is not None
        try:
            return await self.keeper.take(key, tokens)
        except KeeperUnreachable:
            if self.fail_closed:
                raise _uncounted(key, "the worker that keeps them is restarting") from None
            return None

    def take_here(self, key: str, tokens: int) -> Refusal | None:
        """Charge this process's buckets for a sibling worker (the keeper's side of BucketKeeper)."""
        limits = self._limits.get(key)
        return limits.take(key, tokens, time.monotonic()) if limits is not None else None

    def settle_here(self, key: str, charged: int, used: int) -> None:
        limits = self._limits.get(key)
        if limits is not None:
            limits.settle(key, charged, used, time.monotonic())

    def _bucket(self, key: str, limit: str) -> str:
        return f"{self._prefix}{key}:{limit}"

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()


def estimate_tokens(body: dict[str, Any]) -> int:
    """The request's tokens before any tokenizer has seen it: its prompt's, plus the longest answer it allows."""
    return max(1, estimate_prompt_tokens(body) + answer_limit(body))


def answer_limit(body: dict[str, Any]) -> int:
    """The longest answer the request allows (0: it sets none)."""
    answer = body.get("max_completion_tokens") or body.get("max_tokens") or 0
    return answer if isinstance(answer, int) and answer > 0 else 0


def estimate_prompt_tokens(body: dict[str, Any]) -> int:
    """About four characters a token in its messages (and input, for embeddings)."""
    text = 0
    messages = body.get("messages")
    # a route that does not read `messages` (embeddings) has not checked it is a list
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            text += sum(len(str(p.get("text", ""))) for p in content if isinstance(p, dict))
        elif content is not None:
            text += len(str(content))
    given = body.get("input")
    text += sum(len(str(i)) for i in given) if isinstance(given, list) else len(str(given or ""))
    return math.ceil(text / 4)


def _uncounted(key: str, why: str) -> GatewayError:
    return GatewayError(503, f"The client key {key!r} has limits, and they cannot be counted now: {why}, and "
                             f"the gateway is set to refuse meanwhile (limits.redis_down: closed). Retry in a few "
                             f"seconds.", "api_error", code="limits_unavailable", headers={"Retry-After": "2"})


def _too_many(key: str, refusal: Refusal) -> GatewayError:
    """OpenAI's own shape: the type names the limit (requests or tokens)."""
    per = refusal.limit
    if math.isinf(refusal.retry_after_s):
        return GatewayError(429, f"This request needs more {per} than the client key {key!r} is allowed in a "
                                 f"minute ({refusal.allowed}); ask for fewer (max_tokens), or raise the key's "
                                 f"limit.", per, code="rate_limit_exceeded")
    return GatewayError(429, f"The client key {key!r} is over its limit of {refusal.allowed} {per} per minute; "
                             f"retry after {refusal.retry_after} s.", per, code="rate_limit_exceeded",
                        headers={"Retry-After": refusal.retry_after, f"x-ratelimit-limit-{per}": str(refusal.allowed)})


def upstream_tokens(timeline: Timeline) -> int | None:
    """What a request cost upstream in tokens, by the upstream's own usage: nothing for an answer from the
    edge cache; None when the upstream did not say (the estimate stands)."""
    if timeline.cache.from_cache:
        return 0
    if timeline.input_tokens is None and timeline.output_tokens is None:
        return None
    return (timeline.input_tokens or 0) + (timeline.output_tokens or 0)
