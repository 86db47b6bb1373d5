"""The way from a user's city to an option: light in fibre along the great circle (the floor), the longer
way real traffic takes (along the cables, geo/paths.py, or the great circle × a scenario's path factor),
the access network at the user's end, and the handshakes a new connection pays before its request can go.

A new connection costs a DNS lookup (answered by the access network's resolver: one last-mile round
trip), TCP's handshake (one round trip) and TLS 1.3's (one more) before the request's own first byte
leaves. A connection already open pays none of them.

A request larger than TCP's initial congestion window also waits for acknowledgements: the sender may
have only that window in flight, and doubles it each round trip (slow start). A new connection starts
from the initial window, and so does one left idle longer than a retransmission timeout on a host that
restarts idle windows (Linux's defaults: CUBIC, tcp_slow_start_after_idle), so the plan counts a long
prompt's round trips on every long way (found on the live region: a 9 000-token prompt across 180 ms came
a round trip late, docs/architecture.md "`firsttoken plan`"). A connection kept busy, or one on a host
whose congestion control keeps its window through idle spells (BBR), pays less: there the plan is an
upper bound (bench/slow_start.py measures both).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from firsttoken.geo import paths
from firsttoken.geo.places import Place


@dataclass(frozen=True)
class Route:
    floor_ms: float  # the round trip light in fibre needs along the great circle: no route beats it
    distance_tax_ms: float  # what the cables' longer path adds to it
    last_mile_ms: float  # the access network's round trip
    via: tuple[str, ...] = ()  # the cable hubs the way passes (none with a flat path factor, or within a metro)

    @property
    def rtt_ms(self) -> float:
        return self.floor_ms + self.distance_tax_ms + self.last_mile_ms

    @property
    def handshakes_ms(self) -> float:
        """DNS, TCP and TLS 1.3 on a new connection."""
        return self.last_mile_ms + 2 * self.rtt_ms


def route(user: Place, server: Place, path_factor: float | None, last_mile_ms: float,
          measured_ms: float | None = None) -> Route:
    """The way from `user` to `server`: a round trip measured between them where there is one, else along
    the cables, or with `path_factor` the great circle that much longer."""
    floor = user.floor_ms(server)
    if measured_ms is not None:
        return Route(floor, max(measured_ms - floor, 0.0), last_mile_ms)
    if path_factor is not None:
        return Route(floor, floor * (path_factor - 1), last_mile_ms)
    way = paths.path(user, server)
    return Route(floor, max(way.rtt_ms() - floor, 0.0), last_mile_ms, way.hubs)


# RFC 6928's initial window, Linux's default since 3.0: ten segments of an Ethernet path's MSS.
INITIAL_WINDOW_SEGMENTS = 10
MSS_BYTES = 1448  # 1 500-byte MTU less IP and TCP headers with timestamps
# A chat request's HTTP headers and JSON around its messages (an SDK's headers, the model, the options):
# chosen, a few hundred bytes either way changes a round trip only at the edge of a window.
REQUEST_OVERHEAD_BYTES = 600


def slow_start_round_trips(size_bytes: ArrayLike, initial_window: int = INITIAL_WINDOW_SEGMENTS) -> np.ndarray:
    """The round trips beyond the first that each of `size_bytes` sent from an initial window needs: after r
    round trips slow start has let initial_window × (2^r − 1) segments go."""
    segments = np.ceil(np.asarray(size_bytes, dtype=np.float64) / MSS_BYTES)
    return np.maximum(np.ceil(np.log2(segments / initial_window + 1)) - 1, 0).astype(np.int64)
