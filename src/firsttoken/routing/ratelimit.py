"""Rate limits per API key, as providers enforce them: requests and tokens per minute, replenished
continuously (OpenAI documents 60 RPM as one request a second, not 60 at the top of each minute). The
simulated region limits its callers with it, and the gateway its client keys (client_limits.py).

Written by hand because the libraries do not fit: `limits`' in-memory storage starts a timer thread per
hit and its moving window stores one entry per unit of cost (one per token, for TPM); aiolimiter waits
instead of refusing. A continuous bucket is a few lines and gives the exact Retry-After: the deficit
over the refill rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Bucket:
    capacity: float  # a full minute's allowance: a quiet key may burst that much at once
    level: float
    updated: float

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.updated) * self.capacity / 60.0)
        self.updated = now

    def wait_s(self, cost: float) -> float:
        """Seconds until `cost` can be taken (0 when it can now)."""
        return max(0.0, (cost - self.level) * 60.0 / self.capacity)

    def reset_s(self) -> float:
        """Seconds until the bucket is full again: what x-ratelimit-reset-* report."""
        return (self.capacity - self.level) * 60.0 / self.capacity


@dataclass(frozen=True)
class Refusal:
    limit: str  # "requests" | "tokens"
    allowed: int  # per minute
    retry_after_s: float

    @property
    def retry_after(self) -> str:
        """Whole seconds for the Retry-After header, rounded up so that retrying then succeeds."""
        return str(max(1, math.ceil(self.retry_after_s)))


MAX_TRACKED = 10_000  # buckets kept before the full ones (keys quiet for a minute) are forgotten


@dataclass
class KeyLimits:
    """RPM and TPM for each API key; None disables one. Token cost is the prompt plus the answer's
    maximum, counted when the request is admitted (as OpenAI counts max_tokens against TPM)."""

    rpm: int | None = None
    tpm: int | None = None
    _buckets: dict[tuple[str, str], Bucket] = field(default_factory=dict)
    _sweep_at: int = MAX_TRACKED

    def _bucket(self, key: str, limit: str, capacity: int, now: float) -> Bucket:
        bucket = self._buckets.get((key, limit))
        if bucket is None:
            if len(self._buckets) >= self._sweep_at:
                self._forget_full(now)
                # Sweep again only once the table has doubled: a sweep that frees little must not repeat
                # for every new key.
                self._sweep_at = max(MAX_TRACKED, 2 * len(self._buckets))
            bucket = self._buckets[(key, limit)] = Bucket(capacity, capacity, now)
        bucket.refill(now)
        return bucket

    def take(self, key: str, tokens: int, now: float) -> Refusal | None:
        """Charge one request of `tokens` to `key`, or say which limit refuses it and for how long.
        A refused request costs nothing."""
        checks = [(limit, allowed, cost) for limit, allowed, cost in
                  (("requests", self.rpm, 1), ("tokens", self.tpm, tokens)) if allowed is not None]
        buckets = [(limit, allowed, cost, self._bucket(key, limit, allowed, now)) for limit, allowed, cost in checks]
        for limit, allowed, cost, _bucket in buckets:
            if cost > allowed:  # never, however long it waits
                return Refusal(limit, allowed, math.inf)
        short = [Refusal(limit, allowed, bucket.wait_s(cost)) for limit, allowed, cost, bucket in buckets
                 if bucket.level < cost]
        if short:  # the longest wait: retrying after a shorter one would only be refused again
            return max(short, key=lambda r: r.retry_after_s)
        for _, _, cost, bucket in buckets:
            bucket.level -= cost
        return None

    def settle(self, key: str, charged: int, used: int, now: float) -> None:
        """Correct a request's token charge once its usage is known: the difference comes back (or is owed,
        and the next requests wait for it)."""
        if self.tpm is not None and charged != used:
            bucket = self._bucket(key, "tokens", self.tpm, now)
            bucket.level = min(bucket.capacity, bucket.level + charged - used)

    def _forget_full(self, now: float) -> None:
        for where, bucket in list(self._buckets.items()):
            bucket.refill(now)
            if bucket.level >= bucket.capacity:
                del self._buckets[where]

    def headers(self, key: str, now: float) -> dict[str, str]:
        """OpenAI's x-ratelimit-* headers for `key` as of `now`."""
        headers: dict[str, str] = {}
        for limit, allowed in (("requests", self.rpm), ("tokens", self.tpm)):
            if allowed is None:
                continue
            bucket = self._bucket(key, limit, allowed, now)
            headers[f"x-ratelimit-limit-{limit}"] = str(allowed)
            headers[f"x-ratelimit-remaining-{limit}"] = str(int(bucket.level))
            headers[f"x-ratelimit-reset-{limit}"] = f"{bucket.reset_s():.3f}s"
        return headers
