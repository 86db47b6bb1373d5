"""Judging timings measured on a shared machine."""

from __future__ import annotations

import statistics

# queue+prefill is a difference of two clocks in two processes (ours and the region's), each of which a
# busy 2-core machine can delay by a few ms; a systematic error (a round trip counted twice) is 100 ms.
PREFILL_SLACK_MS = 10.0
# What a busy 2-core machine (a CPU hog on each core) may add to a measurement that crosses several
# processes: each waits for a core. A quarter of the lab's 120 ms round trip, so the errors the bounds
# are there for (a round trip missed, or counted twice) still fail.
BUSY_MS = 30.0


def typical(errors: list[float]) -> float:
    """The median of several requests' errors against the truth. The servers, and the delay line where
    there is one, are processes on a shared 2-core machine: one request that lost the CPU for a few ms says
    nothing about attribution, while a systematic error shows in every request, and so in the median."""
    return statistics.median(errors)


def agrees(value: float, truth: float, busy_ms: float = BUSY_MS) -> bool:
    """Whether a measurement (one sample, or the typical of several) agrees with the truth it must meet:
    within 5 % below (nothing on a delay line arrives early), and within 5 % plus `busy_ms` above, since a
    shared 2-core machine that delays a process only ever adds time. The errors this guards against (a
    round trip missed, or counted twice) are a whole round trip."""
    return 0.95 * truth <= value <= 1.05 * truth + busy_ms
