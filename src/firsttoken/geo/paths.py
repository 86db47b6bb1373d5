"""The way traffic actually goes between two places: along the submarine cables and long-haul backbones
that carry transit (cables.csv, each link with the systems behind it), not the great circle.

Lagos to Virginia has no cable of its own: it goes by Europe, and takes half as long again as the great
circle says. A single path factor cannot say that while also saying that New York to London, one straight
cable, is barely longer than the great circle; the graph says both. A place joins the graph at its nearest
hub (and any other about as near): a data centre's metro, a city's nearest landing.

The round trip is light in fibre along the way, `SLACK` times its great-circle length (cables follow the
sea floor and roads, with coils for repair), plus `PER_LINK_MS` for each cable or backbone crossed (the
exchanges, routers and regenerators at its ends) and `ENDS_MS` at the two ends (the data centres' own networks and
the far end's front door). The three were fitted to one source's medians (CloudPing's AWS inter-region
table, bench/data/published_rtts.csv) and checked against the other sources (bench/network_published.py;
docs/benchmarks.md).

Cables that exist but carry little of the transit are left out on purpose, and named here: SACS and SAIL
across the South Atlantic, EllaLink from Brazil to Portugal (São Paulo to Cape Town and to Frankfurt go by
the United States), and SAFE from South Africa to India (Mumbai to Cape Town goes by East Africa).
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from importlib import resources

import networkx as nx

from firsttoken.geo import physics
from firsttoken.geo.places import Place, resolve

# Fitted on CloudPing's AWS medians alone (16 pairs; median error 3 %): bench/network_published.py --fit
SLACK = 1.34  # cable length per great-circle kilometre
PER_LINK_MS = 4.0  # round-trip time for each cable or backbone crossed
ENDS_MS = 10.0  # round-trip time at the two ends together
JOIN_NEAR_KM = 500.0  # a place joins every hub this near, and any within JOIN_RATIO of its nearest
JOIN_RATIO = 1.5
METRO_KM = 100.0  # two places this near are one metro: the way between them is straight


@dataclass(frozen=True)
class Path:
    hubs: tuple[str, ...]  # the hubs passed through, in order
    km: float  # along the links, before slack

    @property
    def links(self) -> int:
        """Cables and backbones crossed (a place's way to its hub is not one)."""
        return max(len(self.hubs) - 1, 0)

    def rtt_ms(self, slack: float = SLACK, per_link_ms: float = PER_LINK_MS, ends_ms: float = ENDS_MS) -> float:
        if not self.hubs:  # within a metro: no long haul, no exchanges
            return physics.floor_rtt_ms(self.km * slack)
        return physics.floor_rtt_ms(self.km * slack) + per_link_ms * self.links + ends_ms


def _km(a: Place, b: Place) -> float:
    return physics.great_circle_km(a.lat, a.lon, b.lat, b.lon)


@functools.cache
def _graph() -> tuple[nx.Graph, dict[str, Place]]:
    graph: nx.Graph = nx.Graph()
    hubs: dict[str, Place] = {}
    with resources.files("firsttoken.geo").joinpath("cables.csv").open(encoding="utf-8") as rows:
        for row in csv.DictReader(rows):
            for name in (row["a"], row["b"]):
                hubs.setdefault(name, resolve(name))
            graph.add_edge(row["a"], row["b"], km=_km(hubs[row["a"]], hubs[row["b"]]), systems=row["systems"])
    return graph, hubs


def _joins(place: Place, hubs: dict[str, Place]) -> dict[str, float]:
    """The hubs a place joins the graph at, with the distance to each."""
    distances = {name: _km(place, hub) for name, hub in hubs.items()}
    nearest = min(distances.values())
    return {name: km for name, km in distances.items() if km <= max(JOIN_NEAR_KM, JOIN_RATIO * nearest)}


@functools.lru_cache(maxsize=4096)
def path(a: Place, b: Place) -> Path:
    """The shortest way from `a` to `b` over the graph (by length); straight across within a metro."""
    graph, hubs = _graph()
    direct = _km(a, b)
    joined = graph.copy()
    for end, place in (("<from>", a), ("<to>", b)):
        for hub, km in _joins(place, hubs).items():
            joined.add_edge(end, hub, km=km)
    if direct <= METRO_KM:
        joined.add_edge("<from>", "<to>", km=direct)
    length, way = nx.bidirectional_dijkstra(joined, "<from>", "<to>", weight="km")
    return Path(tuple(way[1:-1]), float(length))


def hub(name: str) -> Place:
    """A hub of the graph, by the name a Path gives it."""
    return _graph()[1][name]


def rtt_ms(a: Place, b: Place) -> float:
    """The round trip between two places along the cables, without any access network's."""
    return path(a, b).rtt_ms()
