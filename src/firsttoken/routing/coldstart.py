"""What scale-to-zero costs on one target, learned from the streams that found it idle: a first token far
later than its warm ones, after an idle spell, was a cold start (the model loaded back onto a GPU). The
penalty is the cold first tokens' median less the warm ones'; the shortest idle spell that was followed
by a cold start says how soon the platform unloads, and so when a keep-warm ping must go. Once there are
two, the shortest of all is passed over: one slow first token after a pause may have been a queue, and
believing it could spend keep-warm's hourly pings in a minute."""

from __future__ import annotations

import statistics
from collections import deque

MIN_IDLE_S = 1.0  # a request that found the target idle at least this long may have met a cold start
COLD_TIMES = 3.0  # …when its first token took this many times the warm median
COLD_EXTRA_MS = 200.0  # …and at least this much longer: loading weights is not a jitter


class ColdStarts:
    def __init__(self) -> None:
        self.warm: deque[float] = deque(maxlen=64)
        self.cold: deque[float] = deque(maxlen=16)
        self.idle_before_cold: deque[float] = deque(maxlen=16)  # the idle spell that ended in each
        self.seen = 0  # cold starts met since the gateway started (the deques keep only the latest)

    def observe(self, ttft_ms: float, idle_s: float | None) -> None:
        warm = statistics.median(self.warm) if self.warm else None
        if (idle_s is not None and idle_s >= MIN_IDLE_S and warm is not None
                and ttft_ms > max(COLD_TIMES * warm, warm + COLD_EXTRA_MS)):
            self.cold.append(ttft_ms)
            self.idle_before_cold.append(idle_s)
            self.seen += 1
        else:
            self.warm.append(ttft_ms)

    @property
    def unloads_after_s(self) -> float | None:
        """How long idle the platform keeps the model: see the module's docstring."""
        spells = sorted(self.idle_before_cold)
        return spells[1] if len(spells) > 1 else spells[0] if spells else None

    @property
    def penalty_ms(self) -> float | None:
        if not (self.cold and self.warm):
            return None
        return statistics.median(self.cold) - statistics.median(self.warm)
