"""The edge cache in Redis, shared by every gateway that points at it.

Each answer is a hash under `{prefix}a:{key}` with a Redis TTL, so Redis itself forgets it on time. The
bound on bytes is kept in one Lua script per write: it records the answer, adds its size to a running
total, and drops the oldest answers until the total fits. The script runs atomically, so replicas
writing at once cannot overshoot the bound or lose count. Reads are one HMGET on the event loop
(redis.asyncio). Writes go out as tasks the store owns, so the request that caused one never waits for
it.

The semantic index's prompts go to a stream, `{prefix}prompts`, after their answers (so that a reader
never meets a prompt whose answer is not there yet), capped at about `max_prompts` entries. Each gateway
reads the stream at start and then follows it, so a paraphrase of a question that one replica answered
is a hit on every replica.

The cache is an optimisation, so Redis failing must cost next to nothing: every command goes through a
RedisGuard (redis_guard.py), with a short timeout and a circuit breaker. A Redis that is stopped or frozen
makes lookups misses and drops writes; once one command has failed, the others skip Redis without touching
it until a probe finds it back, and the warnings are a line per interval, not one per request. The follower
pauses meanwhile and goes on from where it was. Stats and purges are asked for, not on a request's path:
they raise the Redis error instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from functools import partial
from typing import Any, cast

from firsttoken.cache.entry import Entry, PromptRecord
from firsttoken.cache.stores import matches, rows
from firsttoken.redis_guard import DEFAULT_POLICY, GuardPolicy, RedisGuard

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

FOLLOW_BLOCK_MS = 2000
FOLLOW_PAUSE_S = 1.0  # the follower's least wait after a read that failed or was skipped: it must not spin
_FIELDS = ("kind", "body", "tenant", "model", "created", "expires")
_PROMPT_FIELDS = (b"ref", b"scope", b"text", b"vector", b"expires")


class RedisStore:
    def __init__(self, url: str, max_bytes: int, prefix: str = "firsttoken:cache:", max_prompts: int = 100_000,
                 policy: GuardPolicy = DEFAULT_POLICY) -> None:
        self.max_bytes = max_bytes
        self.prefix = prefix
        self.max_prompts = max_prompts
        self._stream = f"{prefix}prompts"
        self._last_id = b"$"  # where follow() starts: after what prompts() read, else from now
        # A cache read must not cost more than the upstream it saves: a short timeout, then Redis is skipped.
        self.guard = RedisGuard(url, "edge cache", "lookups miss and writes are dropped", log, policy)
        self._redis = self.guard.client()
        # Following the stream waits on Redis by design (and reading it whole at start may take a while): a
        # client of its own, whose reads may block. Its failures open the same circuit.
        self._follower = self.guard.client(blocking_s=FOLLOW_BLOCK_MS / 1000 + 1)
        self._put = self._redis.register_script(_PUT)
        self._drop = self._redis.register_script(_DROP)
        self._books = [f"{prefix}written", f"{prefix}sizes", f"{prefix}bytes"]
        self._writes: set[asyncio.Task[None]] = set()

    def _key(self, key: str) -> str:
        return f"{self.prefix}a:{key}"

    async def get(self, key: str, now: float) -> Entry | None:
        found = cast(list[bytes | None] | None,
                     await self.guard.call(partial(self._redis.hmget, self._key(key), _FIELDS)))
        if found is None or found[0] is None:  # Redis failed or is skipped, or no such answer: a miss
            return None
        kind, body, tenant, model, created, expires = cast(list[bytes], found)  # written together by put()
        if float(expires) <= now:
            return None
        return Entry(cast(Any, kind.decode()), body, tenant.decode(), model.decode(), float(created), float(expires))

    def put(self, key: str, entry: Entry, prompt: PromptRecord | None = None) -> None:
        if entry.size > self.max_bytes:
            return
        task = asyncio.get_running_loop().create_task(self._write(key, entry, prompt))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(self, key: str, entry: Entry, prompt: PromptRecord | None) -> None:
        """Dropped, not retried, when Redis fails: the answer is cached the next time it is asked for."""
        await self.guard.call(partial(self._write_now, key, entry, prompt))

    async def _write_now(self, key: str, entry: Entry, prompt: PromptRecord | None) -> None:
        ttl_ms = max(int((entry.expires - entry.created) * 1000), 1)
        await self._put(keys=[self._key(key), *self._books],
                        args=[entry.kind, entry.body, entry.tenant, entry.model, entry.created, entry.expires,
                              entry.size, ttl_ms, self.max_bytes])
        if prompt is not None:
            await self._redis.xadd(self._stream, {"ref": prompt.ref, "scope": prompt.scope, "text": prompt.text,
                                                  "vector": prompt.vector, "expires": prompt.expires},
                                   maxlen=self.max_prompts, approximate=True)

    async def delete(self, key: str) -> None:
        """One answer that must not be served again (its prompt in the stream finds it gone, and is dropped
        from the indexes that look it up)."""
        await self.guard.call(partial(self._drop, keys=self._books, args=[self._key(key)]))

    async def prompts(self, now: float) -> list[PromptRecord]:
        """Every live prompt in the stream, oldest first; `follow()` goes on from the last."""
        read = await self.guard.call(partial(self._read_prompts, now))
        if read is None:  # once, at start: the guard's own line says why
            log.warning("semantic prompts not read from Redis: this gateway's index starts empty")
            return []
        found, self._last_id = read
        return found

    async def _read_prompts(self, now: float) -> tuple[list[PromptRecord], bytes]:
        found: list[PromptRecord] = []
        last = b"0-0"
        while True:
            page = cast(list[StreamEntry], await self._follower.xrange(self._stream, min=b"(" + last, count=1000))
            found += [record for _, fields in page if (record := _record(fields)) and record.expires > now]
            if page:
                last = page[-1][0]
            if len(page) < 1000:
                return found, last

    async def follow(self) -> AsyncIterator[PromptRecord]:
        """Prompts that any gateway adds from now on, for as long as it is iterated; Redis going away pauses
        it (it waits out the circuit's cool-down, at least FOLLOW_PAUSE_S a turn), it does not end it."""
        last = self._last_id
        while True:
            reply: list[tuple[bytes, list[StreamEntry]]] | None = None
            # After an outage, a short command (which may be the probe) says whether Redis is back, before a
            # read that blocks for seconds.
            if not self.guard.is_open or await self.guard.call(self._redis.ping) is not None:
                reply = cast(list[tuple[bytes, list[StreamEntry]]] | None, await self.guard.call(
                    partial(self._follower.xread, {self._stream: last}, count=500, block=FOLLOW_BLOCK_MS)))
            if reply is None:
                await asyncio.sleep(max(self.guard.retry_in_s(), FOLLOW_PAUSE_S))
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


# A stream entry as redis-py returns it: its id and fields. It types replies for either decode_responses
# setting; these clients never decode, so they are bytes.
StreamEntry = tuple[bytes, dict[bytes, bytes]]


def _record(fields: dict[bytes, bytes]) -> PromptRecord | None:
    """A stream entry as a prompt; None for one that is not (written by something else under the prefix)."""
    try:
        ref, scope, text, vector, expires = (fields[name] for name in _PROMPT_FIELDS)
        return PromptRecord(ref.decode(), scope.decode(), text.decode(), vector, float(expires))
    except (KeyError, ValueError) as exc:
        log.warning("a semantic prompt in Redis could not be read (%s); skipped", exc)
        return None
