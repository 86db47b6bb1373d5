"""Judging timings measured on a shared machine."""

from __future__ import annotations

import statistics


def typical(errors: list[float]) -> float:
    """The median of several requests' errors against the truth. The servers, and the delay line where
    there is one, are processes on a shared 2-core machine: one request that lost the CPU for a few ms says
    nothing about attribution, while a systematic error shows in every request, and so in the median."""
    return statistics.median(errors)
