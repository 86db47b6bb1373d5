"""The clock a place keeps: the time zone database's zone for it, so that traffic shaped over a day peaks at
each city's own evening (Lagos at UTC+1, Nairobi at UTC+3).

zone1970.tab lists every zone with the countries it covers and its principal city's coordinates. A city
takes the nearest zone of its own country (the United States' four mainland zones, Nigeria's one); a
region or a "lat,lon" has no country, and takes the nearest zone of all, which is right away from zone
borders. The tzdata package ships the table where the system has none.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import resources
from zoneinfo import ZoneInfo

from firsttoken.geo import physics
from firsttoken.geo.places import Place

_COORDINATE = re.compile(r"^([+-]\d+)([+-]\d+)$")


@dataclass(frozen=True)
class _Zone:
    name: str
    countries: frozenset[str]
    lat: float
    lon: float


def _degrees(text: str, degree_digits: int) -> float:
    """ISO 6709 as zone1970.tab writes it: ±DDMM[SS] or ±DDDMM[SS]."""
    sign = -1.0 if text[0] == "-" else 1.0
    digits = text[1:]
    degrees, minutes = int(digits[:degree_digits]), int(digits[degree_digits:degree_digits + 2])
    seconds = int(digits[degree_digits + 2:] or 0)
    return sign * (degrees + minutes / 60 + seconds / 3600)


@functools.cache
def _zones() -> tuple[_Zone, ...]:
    text = (resources.files("tzdata.zoneinfo") / "zone1970.tab").read_text(encoding="utf-8")
    zones = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        countries, coordinate, name = line.split("\t")[:3]
        match = _COORDINATE.match(coordinate)
        assert match is not None, coordinate
        zones.append(_Zone(name, frozenset(countries.split(",")), _degrees(match[1], 2), _degrees(match[2], 3)))
    return tuple(zones)


def zone_of(place: Place) -> ZoneInfo:
    """The time zone `place` keeps."""
    zones = _zones()
    own = [z for z in zones if place.country in z.countries] if place.country else []
    nearest = min(own or zones, key=lambda z: physics.great_circle_km(place.lat, place.lon, z.lat, z.lon))
    return ZoneInfo(nearest.name)


def utc_offset_h(place: Place, when: datetime) -> float:
    """Hours `place`'s clock is ahead of UTC at `when` (summer time included)."""
    offset = when.astimezone(zone_of(place)).utcoffset()
    return (offset or timedelta()).total_seconds() / 3600
