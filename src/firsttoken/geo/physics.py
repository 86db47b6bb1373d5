"""The physics of distance: great circles and light in glass.

The floor is what no software can remove: the great-circle distance at the speed of light in fibre.
Real cables are longer than the great circle (they follow coasts, land at hubs, detour round
continents), so an estimate of the actual propagation multiplies the floor by a path factor.
"""

from __future__ import annotations

import math

EARTH_RADIUS_KM = 6371.0088  # mean radius (IUGG)
SPEED_OF_LIGHT_KM_S = 299_792.458
FIBRE_REFRACTIVE_INDEX = 1.468  # group index of standard single-mode fibre (G.652) at 1550 nm
FIBRE_KM_PER_S = SPEED_OF_LIGHT_KM_S / FIBRE_REFRACTIVE_INDEX  # about 204 000 km/s, 4.9 µs per km
# Fibre routes run 1.3–2× the great circle (longer on thin, coast-hugging routes such as West Africa's);
# 1.5 is a middle estimate until a measured RTT says better (path factor = measured / floor).
DEFAULT_PATH_FACTOR = 1.5


def great_circle_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Haversine distance on the mean-radius sphere (within 0.5 % of the ellipsoid: far below what cable
    routing adds, so a geodesic library would buy nothing here)."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(h)))


def fibre_one_way_s(distance_km: float, path_factor: float = 1.0) -> float:
    """Seconds for light in fibre to cover `distance_km` × `path_factor`."""
    if path_factor < 1:
        raise ValueError(f"path factor {path_factor!r}: a cable is never shorter than the great circle (>= 1)")
    return distance_km * path_factor / FIBRE_KM_PER_S


def floor_rtt_ms(distance_km: float) -> float:
    """The round trip no route can beat: there and back along the great circle in fibre."""
    return 2 * fibre_one_way_s(distance_km) * 1000
