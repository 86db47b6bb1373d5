"""The edge cache in Redis, shared by every gateway that points at it.

Each answer is a hash under `{prefix}a:{key}` with a Redis TTL, so Redis itself forgets it on time. The
bound on bytes is kept in one Lua script per write: it records the answer, adds its size to a running
total, and drops the oldest answers until the total fits. The script runs atomically, so replicas
writing at once cannot overshoot the bound or lose count. Reads are one HGETALL on the event loop
(redis.asyncio). Writes go out as tasks the store owns, so the request that caused one never waits for
it.

The semantic index's prompts go to a stream, `{prefix}prompts`, after their answers (so that a reader
never meets a prompt whose answer is not there yet), capped at about `max_prompts` entries. Each gateway
reads the stream at start and then follows it, so a paraphrase of a question that one replica answered
is a hit on every replica.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as redis
from redis.exceptions import RedisError

from firsttoken.cache.entry import Entry, PromptRecord
from firsttoken.cache.stores import matches, rows

log = logging.getLogger("firsttoken.cache")

# KEYS: the answer, the written-order set, the sizes hash, the byte total.
# ARGV: kind, body, tenant, model, created, expires, size, ttl (ms), max_bytes.
_PUT = """
local old = redis.call('HGET', KEYS[3], KEYS[1])
if old then redis.call('DECRBY', KEYS[4], old) end
redis.call('HSET', KEYS[1], 'kind', ARGV[1], 'body', ARGV[2], 'tenant', ARGV[3], 'model', ARGV[4],
           'created', ARGV[5], 'expires', ARGV[6], 'size', ARGV[7])
redis.call('PEXPIRE', KEYS[1], ARGV[8])
redis.call('ZADD', KEYS[2], ARGV[5], KEYS[1])
redis.call('HSET', KEYS[3], KEYS[1], ARGV[7])
local total = redis.call('INCRBY', KEYS[4], ARGV[7])
local bound = tonumber(ARGV[9])
while total > bound do
  local oldest = redis.call('ZPOPMIN', KEYS[2])
  if #oldest == 0 then break end
  local size = redis.call('HGET', KEYS[3], oldest[1])
  redis.call('HDEL', KEYS[3], oldest[1])
  redis.call('DEL', oldest[1])
  if size then total = redis.call('DECRBY', KEYS[4], size) end
end
return total
"""

# KEYS: the written-order set, the sizes hash, the byte total. ARGV: the answer keys to drop.
_DROP = """
local dropped = 0
for _, key in ipairs(ARGV) do
  local size = redis.call('HGET', KEYS[2], key)
  redis.call('HDEL', KEYS[2], key)
  redis.call('ZREM', KEYS[1], key)
  dropped = dropped + redis.call('DEL', key)
  if size then redis.call('DECRBY', KEYS[3], size) end
end
return dropped
"""

RETRY_AFTER_S = 5.0
FOLLOW_BLOCK_MS = 2000
_FIELDS = ("kind", "body", "tenant", "model", "created", "expires")
_PROMPT_FIELDS = (b"ref", b"scope", b"text", b"vector", b"expires")


class RedisStore:
    def __init__(self, url: str, max_bytes: int, prefix: str = "firsttoken:cache:", max_prompts: int = 100_000) -> None:
        self.max_bytes = max_bytes
        self.prefix = prefix
        self.max_prompts = max_prompts
        self._stream = f"{prefix}prompts"
        self._last_id = b"$"  # where follow() starts: after what prompts() read, else from now
        # A cache read must not cost more than the upstream it saves: short timeouts, then a pause.
        self._redis = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        # Following the stream waits on Redis by design: a client of its own, whose reads may block.
        self._follower = redis.Redis.from_url(url, socket_timeout=FOLLOW_BLOCK_MS / 1000 + 5,
                                              socket_connect_timeout=0.5)
        self._put = self._redis.register_script(_PUT)
        self._drop = self._redis.register_script(_DROP)
        self._books = [f"{prefix}written", f"{prefix}sizes", f"{prefix}bytes"]
        self._writes: set[asyncio.Task[None]] = set()
        self._down_until = 0.0  # after a failed read, requests do not wait on Redis again for a while

    def _key(self, key: str) -> str:
        return f"{self.prefix}a:{key}"

    async def get(self, key: str, now: float) -> Entry | None:
        if now < self._down_until:
            return None
        try:
            found = await self._redis.hmget(self._key(key), _FIELDS)
        except RedisError as exc:  # the cache is an optimisation: a Redis that is down is a miss
            log.warning("cache read failed: %s; reads skip Redis for %g s", exc, RETRY_AFTER_S)
            self._down_until = now + RETRY_AFTER_S
            return None
        if found[0] is None or float(found[5]) <= now:
            return None
        return Entry(found[0].decode(), found[1], found[2].decode(), found[3].decode(), float(found[4]),
                     float(found[5]))

    def put(self, key: str, entry: Entry, prompt: PromptRecord | None = None) -> None:
        if entry.size > self.max_bytes:
            return
        task = asyncio.get_running_loop().create_task(self._write(key, entry, prompt))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(self, key: str, entry: Entry, prompt: PromptRecord | None) -> None:
        ttl_ms = max(int((entry.expires - entry.created) * 1000), 1)
        try:
            await self._put(keys=[self._key(key), *self._books],
                            args=[entry.kind, entry.body, entry.tenant, entry.model, entry.created, entry.expires,
                                  entry.size, ttl_ms, self.max_bytes])
            if prompt is not None:
                await self._redis.xadd(self._stream, {"ref": prompt.ref, "scope": prompt.scope, "text": prompt.text,
                                                      "vector": prompt.vector, "expires": prompt.expires},
                                       maxlen=self.max_prompts, approximate=True)
        except RedisError as exc:
            log.warning("cache write failed: %s", exc)

    async def prompts(self, now: float) -> list[PromptRecord]:
        """Every live prompt in the stream, oldest first; `follow()` goes on from the last."""
        found: list[PromptRecord] = []
        last = b"0-0"
        try:
            while True:
                page = await self._follower.xrange(self._stream, min=b"(" + last, count=1000)
                found += [record for _, fields in page if (record := _record(fields)) and record.expires > now]
                if page:
                    last = page[-1][0]
                if len(page) < 1000:
                    break
        except RedisError as exc:
            log.warning("semantic prompts not read from Redis (%s): this gateway's index starts empty", exc)
            return []
        self._last_id = last
        return found

    async def follow(self) -> AsyncIterator[PromptRecord]:
        """Prompts that any gateway adds from now on, for as long as it is iterated; Redis going away pauses
        it, it does not end it."""
        last = self._last_id
        while True:
            try:
                reply = await self._follower.xread({self._stream: last}, count=500, block=FOLLOW_BLOCK_MS)
            except RedisError as exc:
                log.warning("following semantic prompts in Redis failed: %s; again in %g s", exc, RETRY_AFTER_S)
                await asyncio.sleep(RETRY_AFTER_S)
                continue
            for _, entries in reply:
                for entry_id, fields in entries:
                    last = entry_id
                    if record := _record(fields):
                        yield record

    async def _answers(self) -> list[tuple[str, dict[bytes, Any]]]:
        """Every live answer's key and facts (for stats and purges: a scan, not a request's path)."""
        await self.settle()
        keys = [k.decode() async for k in self._redis.scan_iter(match=f"{self.prefix}a:*", count=1000)]
        found = []
        for key in keys:
            facts = await self._redis.hmget(key, ("tenant", "model", "size", "kind", "created", "expires"))
            if facts[0] is not None:
                found.append((key, dict(zip((b"tenant", b"model", b"size", b"kind", b"created", b"expires"), facts,
                                            strict=True))))
        return found

    async def stats(self) -> list[dict[str, Any]]:
        totals: dict[tuple[str, str], list[int]] = {}
        for _, facts in await self._answers():
            slot = totals.setdefault((facts[b"tenant"].decode(), facts[b"model"].decode()), [0, 0])
            slot[0] += 1
            slot[1] += int(facts[b"size"])
        return rows((t, m, n, size) for (t, m), (n, size) in totals.items())

    async def purge(self, tenant: str | None = None, model: str | None = None) -> int:
        doomed = []
        for key, facts in await self._answers():
            if matches(facts[b"tenant"].decode(), facts[b"model"].decode(), tenant, model):
                doomed.append(key)
        dropped = 0
        for start in range(0, len(doomed), 500):
            dropped += int(await self._drop(keys=self._books, args=doomed[start:start + 500]))
        return dropped

    async def settle(self) -> None:
        """Wait for the writes handed off so far."""
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)

    async def close(self) -> None:
        await self.settle()
        await self._redis.aclose()
        await self._follower.aclose()


def _record(fields: dict[bytes, bytes]) -> PromptRecord | None:
    """A stream entry as a prompt; None for one that is not (written by something else under the prefix)."""
    try:
        ref, scope, text, vector, expires = (fields[name] for name in _PROMPT_FIELDS)
        return PromptRecord(ref.decode(), scope.decode(), text.decode(), vector, float(expires))
    except (KeyError, ValueError) as exc:
        log.warning("a semantic prompt in Redis could not be read (%s); skipped", exc)
        return None
