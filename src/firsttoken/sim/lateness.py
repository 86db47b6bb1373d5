"""How far behind schedule the region ran: a histogram of lateness, cheap enough to record every event.

The region's promise is that each token leaves when the engine's schedule says (plus the distance);
this is its own account of how well it kept that promise, served on GET /sim/stats.
"""

from __future__ import annotations

BUCKET_S = 0.0001  # 0.1 ms
BUCKETS = 10_000  # up to 1 s; later than that lands in the last bucket


class Lateness:
    def __init__(self) -> None:
        self.counts = [0] * BUCKETS
        self.events = 0
        self.worst_s = 0.0

    def record(self, late_s: float) -> None:
        if late_s < 0:
            late_s = 0.0
        self.counts[min(int(late_s / BUCKET_S), BUCKETS - 1)] += 1
        self.events += 1
        if late_s > self.worst_s:
            self.worst_s = late_s

    def quantile_ms(self, q: float) -> float:
        """The upper edge of the bucket holding the q-quantile, in ms (0 with no events)."""
        if not self.events:
            return 0.0
        rank, seen = q * self.events, 0
        for index, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                return (index + 1) * BUCKET_S * 1000
        return self.worst_s * 1000

    def summary(self) -> dict[str, float]:
        return {"events": self.events, "p50_ms": self.quantile_ms(0.5), "p99_ms": self.quantile_ms(0.99),
                "p999_ms": self.quantile_ms(0.999), "max_ms": round(self.worst_s * 1000, 3)}

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]
