"""Budgets shared by replicas through one Redis: each budgeted key's spend per UTC day and month, and the
most its requests in flight may still cost, on Redis's clock, checked and held in one Lua script so that
two replicas cannot both let in the request that does not fit. Amounts are integer nano-dollars (exact
sums; a double holds them exactly up to $9 million).

A hold lapses after HOLD_S, so that a replica killed mid-request does not hold a key's budget for ever. A
Redis that is down or frozen (redis_guard.py) leaves each replica to its own count (its ledger and holds),
and what it settles meanwhile is not added to the shared totals.
"""

from __future__ import annotations

import logging
from functools import partial

from firsttoken.redis_guard import DEFAULT_POLICY, GuardPolicy, RedisGuard

log = logging.getLogger("firsttoken.spend")

HOLD_S = 1800  # the longest a request's hold is kept: half an hour of generation
NANO = 1e9
DAY_TTL_S = 3 * 86400
MONTH_TTL_S = 40 * 86400

# KEYS[1]: the key's holds (a sorted set: "<request id>:<nano-dollars>", scored by when it lapses);
# KEYS[2..]: each period's total (nano-dollars). ARGV[1]: the most this request may cost; ARGV[2]: its id;
# ARGV[3]: HOLD_S; ARGV[2 + i]: the limit of KEYS[i]. Returns {refused period (1-based, 0: held), held,
# each period's total}.
_TAKE = """
local now = tonumber(redis.call('TIME')[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = 0
for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  held = held + tonumber(string.match(member, ':(%d+)$'))
end
local most, refused, spent = tonumber(ARGV[1]), 0, {}
for i = 2, #KEYS do
  local total = tonumber(redis.call('GET', KEYS[i]) or '0')
  spent[i - 1] = tostring(total)
  if refused == 0 and total + held + most > tonumber(ARGV[i + 2]) then refused = i - 1 end
end
if refused == 0 then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2] .. ':' .. ARGV[1])
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]) + 60)
end
return {tostring(refused), tostring(held), unpack(spent)}
"""

# KEYS: the holds, the day's total, the month's. ARGV: the hold's member ('' for none), the cost (nano).
_SETTLE = f"""
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[1], ARGV[1]) end
if tonumber(ARGV[2]) > 0 then
  redis.call('INCRBY', KEYS[2], ARGV[2])
  redis.call('EXPIRE', KEYS[2], {DAY_TTL_S})
  redis.call('INCRBY', KEYS[3], ARGV[2])
  redis.call('EXPIRE', KEYS[3], {MONTH_TTL_S})
end
return 0
"""


class SharedSpend:
    def __init__(self, url: str, prefix: str = "firsttoken:spend:", policy: GuardPolicy = DEFAULT_POLICY) -> None:
        self.guard = RedisGuard(url, "shared budgets", "each replica holds keys to its own count", log, policy)
        self._redis = self.guard.client()
        self._take = self._redis.register_script(_TAKE)
        self._settle = self._redis.register_script(_SETTLE)
        self._prefix = prefix

    def _holds(self, key: str) -> str:
        return f"{self._prefix}{key}:held"

    def total(self, key: str, period: str) -> str:
        """The Redis key of `key`'s total for a period: `day:YYYY-MM-DD` or `month:YYYY-MM`."""
        return f"{self._prefix}{key}:{period}"

    async def take(self, key: str, periods: list[tuple[str, float]], most: float,
                   request_id: str) -> tuple[int, float, list[float]] | None:
        """Hold `most` for the request unless it does not fit in each (period, limit): (the 1-based period
        that refused it or 0, what the key's requests in flight hold, each period's total) in USD; None
        when Redis cannot answer."""
        args: list[str | int] = [round(most * NANO), request_id, HOLD_S, *(round(limit * NANO) for _, limit in periods)]
        reply = await self.guard.call(partial(self._take, keys=[self._holds(key),
                                                                *(self.total(key, p) for p, _ in periods)], args=args))
        if reply is None:
            return None
        refused, held, *spent = (int(value) for value in reply)
        return refused, held / NANO, [s / NANO for s in spent]

    async def settle(self, key: str, request_id: str, held: float, usd: float, day: str) -> None:
        """The request's cost into the key's day and month, and its hold (if any) let go."""
        member = f"{request_id}:{round(held * NANO)}" if held else ""
        await self.guard.call(partial(self._settle, keys=[self._holds(key), self.total(key, f"day:{day}"),
                                                          self.total(key, f"month:{day[:7]}")],
                                      args=[member, round(usd * NANO)]))

    async def close(self) -> None:
        await self._redis.aclose()
