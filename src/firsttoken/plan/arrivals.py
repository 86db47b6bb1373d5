"""When the users send, and from where: a Poisson process whose rate follows each city's own clock over the
day (`over_the_day`) and jumps during bursts.

The rate of city c at time t is rate × share(c) × shape(c's local hour at t) × (burst factor while a burst
runs). Arrivals are drawn by thinning (Lewis and Shedler): candidates at the highest rate anywhere, each
kept with the probability of its own rate over that highest one. A flat day without bursts keeps every
candidate and draws nothing more, so such a scenario's traffic is the plain Poisson process it always was.

The shapes' hourly values are chosen by construction to stand for their kind of traffic, not measured;
a scenario that knows its own hourly profile gives it as 24 numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np

from firsttoken.geo.places import Place
from firsttoken.geo.timezones import utc_offset_h

# Relative request rate by local hour (0 = midnight to 1 am); each is scaled to a mean of 1 over the day.
SHAPES: dict[str, tuple[float, ...]] = {
    "flat": (1.0,) * 24,
    # people at work: quiet at night, a plateau from 9 to 5 with a dip at lunch, a tail into the evening
    "working-day": (0.1, 0.08, 0.06, 0.06, 0.08, 0.15, 0.35, 0.8, 1.5, 2.0, 2.1, 2.1,
                    1.8, 1.9, 2.0, 2.0, 1.8, 1.4, 1.0, 0.8, 0.6, 0.45, 0.3, 0.18),
    # people at home: some all day, a peak from 7 to 11 pm
    "evening": (0.6, 0.35, 0.2, 0.15, 0.15, 0.2, 0.35, 0.6, 0.8, 0.9, 0.95, 1.0,
                1.05, 1.0, 0.95, 0.95, 1.0, 1.15, 1.4, 1.8, 2.1, 2.2, 1.8, 1.1),
}


@dataclass(frozen=True)
class Bursts:
    every_s: float  # on average, one starts this often (a Poisson process of bursts)
    length_s: float
    factor: float  # the rate while one runs, as a multiple of the usual


@dataclass(frozen=True)
class Arrivals:
    """The scenario's users as an arrival process."""

    rate_per_s: float  # all cities together: the day's mean where a shape gives the rate over the day
    places: list[Place]
    shares: np.ndarray  # per city, adding up to 1
    shape: tuple[float, ...]  # 24 hourly values, any scale
    start: datetime  # the run's virtual time 0, in UTC
    bursts: Bursts | None = None

    def draw(self, duration_s: float, rng: np.random.Generator,
             thinning: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(send times in seconds from the start, each one's city index), sorted by time. `thinning` draws
        the bursts and which candidates stay, apart from `rng`, so a flat day draws exactly what it did."""
        shape = np.asarray(self.shape, dtype=np.float64)
        shape = shape / shape.mean()
        burst_factor = self.bursts.factor if self.bursts is not None else 1.0
        peak = float(shape.max()) * burst_factor
        highest = self.rate_per_s * peak
        expected = highest * duration_s
        gaps = rng.exponential(1 / highest, int(expected + 10 * np.sqrt(expected) + 10))
        sent = np.cumsum(gaps)
        sent = sent[sent < duration_s]
        cities = rng.choice(len(self.shares), size=len(sent), p=self.shares)
        if peak == 1.0:  # flat, no bursts: every candidate is an arrival
            return sent, cities
        rate = np.interp(self._local_hours(sent, cities), np.arange(24) + 0.5, shape, period=24)
        if self.bursts is not None:
            rate = rate * np.where(_in_bursts(sent, self.bursts, duration_s, thinning), burst_factor, 1.0)
        keep = thinning.random(len(sent)) < rate / peak
        return sent[keep], cities[keep]

    def _local_hours(self, sent: np.ndarray, cities: np.ndarray) -> np.ndarray:
        """Each arrival's hour of the day on its city's clock (the offsets of the run's start: a run across
        a change to or from summer time keeps the earlier one)."""
        offsets = np.array([utc_offset_h(place, self.start) for place in self.places])
        start_h = self.start.hour + self.start.minute / 60 + self.start.second / 3600
        return (start_h + sent / 3600 + offsets[cities]) % 24


def _in_bursts(times: np.ndarray, bursts: Bursts, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    """Whether each (sorted) time falls in a burst: bursts start as a Poisson process and last `length_s`."""
    count = int(duration_s / bursts.every_s * 2 + 10)
    starts = np.cumsum(rng.exponential(bursts.every_s, count))
    starts = starts[starts < duration_s]
    if not len(starts):
        return np.zeros(len(times), dtype=bool)
    latest = np.searchsorted(starts, times, side="right") - 1  # the last burst begun by each time (a later
    # one that began covers any earlier one still running)
    return (latest >= 0) & (times < starts[np.maximum(latest, 0)] + bursts.length_s)
