"""What one target's next first token is expected to cost, from what the journeys measured.

Before any traffic the estimate is a prior: the physics floor from this gateway to the target's region,
so that the nearer region wins the first requests. The floor is a lower bound, so the prior is
optimistic: a target never measured looks better than any that was, and is tried (measured) early.
Each measured time to first token moves the estimate (an exponentially weighted mean). An estimate
that is not refreshed drifts back to its prior: a target that was slow once is tried again later,
instead of never.
"""

from __future__ import annotations

import math
from collections import deque

UNKNOWN_FLOOR_MS = 0.0  # a target whose region is not known: as optimistic as the nearest can be
WEIGHT = 0.3  # of each new measurement in the mean
FORGET_S = 30.0  # time constant of the drift back to the prior
SAMPLES = 128  # recent measurements kept for percentiles


class TtftEstimate:
    def __init__(self, floor_ms: float | None) -> None:
        self.prior = UNKNOWN_FLOOR_MS if floor_ms is None else floor_ms
        self.mean = self.prior
        self.measured_at: float | None = None
        self.recent: deque[float] = deque(maxlen=SAMPLES)

    def observe(self, ttft_ms: float, now: float) -> None:
        self.mean = ttft_ms if self.measured_at is None else self.value(now) + WEIGHT * (ttft_ms - self.value(now))
        self.measured_at = now
        self.recent.append(ttft_ms)

    def value(self, now: float) -> float:
        if self.measured_at is None:
            return self.prior
        kept = math.exp(-(now - self.measured_at) / FORGET_S)
        return self.prior + (self.mean - self.prior) * kept

    def cost(self, now: float, in_flight: int, bias: float = 1.0) -> float:
        """The expected time to first token of one more request while `in_flight` others are served: the
        part above the floor (the far end's queue and prefill, and the path's excess) times
        (1 + in_flight) ** bias. The way there and back does not grow with the load, so a near region a
        request or two busy still beats a far one that is idle: peak-EWMA's estimate × (1 + in flight)
        assumes every target is as far away, and would send a share of traffic across an ocean to save
        a few ms of queue. `bias` (Envoy's active_request_bias) below 1 says that one more request costs
        a batching server less than a whole request's time; what it does cost shows in the measurements."""
        value = self.value(now)
        return self.prior + max(value - self.prior, 0.0) * (1 + in_flight) ** bias

    def percentile(self, q: float) -> float | None:
        """The q-th percentile (0–100, nearest rank) of the recent measurements; None before any."""
        if not self.recent:
            return None
        ordered = sorted(self.recent)
        return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]
