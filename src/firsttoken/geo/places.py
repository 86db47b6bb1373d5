"""Places by name: cities (cities.csv, from GeoNames), cloud regions (regions.csv), or "lat,lon".

`resolve("lagos")`, `resolve("san jose, cr")`, `resolve("aws:us-east-1")`, `resolve("us-east-1")` and
`resolve("6.45,3.39")` all give a Place; a name that matches nothing raises GeoError with the closest
known names. A city name shared by several places means the most populous (San Jose is California's);
", CC" with an ISO country code picks another. Towns too small for the table (Ashburn, where us-east-1
is) are reached by their region's code.
"""

from __future__ import annotations

import csv
import difflib
import functools
import re
import unicodedata
from dataclasses import dataclass
from importlib import resources

from firsttoken.geo import physics

_LAT_LON = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*$")
_WITH_COUNTRY = re.compile(r"^(.*?),\s*([a-z]{2})$")


class GeoError(ValueError):
    """A place that cannot be found; the message lists the closest known names."""


@dataclass(frozen=True)
class Place:
    name: str  # as a person would write it: "Lagos, NG", "aws:us-east-1 (Ashburn, Virginia)", "6.45,3.39"
    lat: float
    lon: float
    code: str | None = None  # a region's code; None for cities and coordinates
    country: str | None = None  # a city's ISO country code; None for regions and coordinates

    def __str__(self) -> str:
        return self.name

    def floor_ms(self, other: Place) -> float:
        """The physics floor of a round trip between here and `other` (ms)."""
        return physics.floor_rtt_ms(physics.great_circle_km(self.lat, self.lon, other.lat, other.lon))


@dataclass(frozen=True)
class _City:
    name: str
    country: str
    population: int
    lat: float
    lon: float
    capital: bool = False


def _fold(text: str) -> str:
    """Case- and accent-insensitive form: "São Paulo" and "sao paulo" are one key."""
    decomposed = unicodedata.normalize("NFKD", text.strip().casefold())
    return " ".join("".join(c for c in decomposed if not unicodedata.combining(c)).split())


@functools.cache
def _cities() -> tuple[dict[str, list[_City]], dict[str, list[_City]]]:
    """Cities by folded name and by folded alternate name, most populous first: the 12 000 cities of
    50 000 people or more and every national capital, from GeoNames (CC BY 4.0; built by
    scripts/make_cities.py)."""
    by_name: dict[str, list[_City]] = {}
    by_alias: dict[str, list[_City]] = {}
    with resources.files(__package__).joinpath("cities.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            city = _City(row["name"], row["country"], int(row["population"]), float(row["lat"]), float(row["lon"]),
                         row["capital"] == "1")
            by_name.setdefault(_fold(city.name), []).append(city)
            for alias in filter(None, row["aliases"].split("|")):
                by_alias.setdefault(_fold(alias), []).append(city)
    for table in (by_name, by_alias):
        for cities in table.values():
            cities.sort(key=lambda c: -c.population)
    return by_name, by_alias


def cities() -> list[_City]:
    """Every known city, once."""
    return [city for same_name in _cities()[0].values() for city in same_name]


@functools.cache
def regions() -> dict[str, Place]:
    """Cloud regions and LLM APIs' serving locations, by code ("aws:us-east-1", "api:openai")."""
    table: dict[str, Place] = {}
    with resources.files(__package__).joinpath("regions.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            code = row["code"]
            table[code] = Place(f"{code} ({row['name']})", float(row["lat"]), float(row["lon"]), code)
    return table


def resolve(text: str) -> Place:
    """The place that `text` names: a region code, a city (optionally ", CC"), or "lat,lon"."""
    if not isinstance(text, str) or not text.strip():
        raise GeoError("a place is a city name (lagos), a region code (aws:us-east-1) or lat,lon (6.45,3.39)")
    if match := _LAT_LON.match(text):
        lat, lon = float(match[1]), float(match[2])
        if not (-90 <= lat <= 90 and -180 <= lon <= 180):
            raise GeoError(f"{text!r}: latitude must be within ±90 and longitude within ±180")
        return Place(f"{lat:g},{lon:g}", lat, lon)
    key = _fold(text)
    if ":" in key:
        return _region(key, text)
    bare = [p for code, p in regions().items() if code.split(":", 1)[1] == key]
    if len(bare) == 1:
        return bare[0]
    return _city(key, text)


def _region(key: str, text: str) -> Place:
    table = regions()
    if key in table:
        return table[key]
    close = difflib.get_close_matches(key, list(table), n=4, cutoff=0.6)
    hint = f" Closest known: {', '.join(close)}." if close else ""
    providers = sorted({code.split(":", 1)[0] for code in table})
    raise GeoError(f"unknown region {text!r}.{hint} Region codes are provider:region with provider one of "
                   f"{', '.join(providers)} (e.g. aws:us-east-1, gcp:europe-west1), or give lat,lon.")


def _city(key: str, text: str) -> Place:
    by_name, by_alias = _cities()
    country = None
    if (match := _WITH_COUNTRY.match(key)) and match[1]:
        key, country = match[1], match[2].upper()
    for table in (by_name, by_alias):
        found = [c for c in table.get(key, ()) if country is None or c.country == country]
        if found:
            city = found[0]
            return Place(f"{city.name}, {city.country}", city.lat, city.lon, country=city.country)
    # Only names that start alike are compared: difflib over all 34 000 would take a second.
    candidates = [name for name in by_name if name[:1] == key[:1]]
    close = difflib.get_close_matches(key, candidates, n=4, cutoff=0.75)
    hint = f" Closest known: {', '.join(by_name[n][0].name + ', ' + by_name[n][0].country for n in close)}." \
        if close else ""
    where = f" in country {country}" if country else ""
    raise GeoError(f"unknown place {text!r}{where}.{hint} Give a capital or a city of 50 000 people or more "
                   f"(optionally 'city, CC'), a region code such as aws:us-east-1, or lat,lon.")
