"""The way along the cables: which hubs it passes, and how close its round trips come to published
measurements it was not fitted on (bench/data/published_rtts.csv)."""

from __future__ import annotations

import csv
from pathlib import Path

import networkx as nx
import pytest

from firsttoken.geo import paths, physics
from firsttoken.geo.places import resolve

ROWS = Path(__file__).resolve().parents[2] / "bench" / "data" / "published_rtts.csv"


def way(a: str, b: str) -> paths.Path:
    return paths.path(resolve(a), resolve(b))


def test_the_graph_is_one_piece_and_every_hub_is_a_known_place() -> None:
    graph, hubs = paths._graph()
    assert nx.is_connected(graph)
    assert len(hubs) > 40 and all(hub.lat or hub.lon for hub in hubs.values())


def test_one_straight_cable_is_barely_longer_than_the_great_circle() -> None:
    crossing = way("new york", "london")
    assert crossing.hubs == ("new york city", "london")
    floor = resolve("new york").floor_ms(resolve("london"))
    assert crossing.rtt_ms() < 1.6 * floor


def test_lagos_reaches_virginia_by_europe_and_pays_for_it() -> None:
    lagos, virginia = resolve("lagos"), resolve("aws:us-east-1")
    there = paths.path(lagos, virginia)
    assert {"lisbon", "london", "madrid", "bilbao", "paris"} & set(there.hubs)  # no cable crosses directly
    assert there.rtt_ms() > 1.7 * lagos.floor_ms(virginia)


def test_sao_paulo_reaches_cape_town_by_the_north() -> None:
    assert "new york city" in way("aws:sa-east-1", "aws:af-south-1").hubs  # SACS carries little transit


def test_within_a_metro_the_way_is_straight() -> None:
    near = way("aws:eu-west-2", "london")
    assert near.hubs == ()
    assert near.rtt_ms() == pytest.approx(physics.floor_rtt_ms(near.km * paths.SLACK))


def test_the_way_is_the_same_both_ways() -> None:
    assert way("nairobi", "aws:eu-west-1").rtt_ms() == pytest.approx(way("aws:eu-west-1", "nairobi").rtt_ms())


def test_published_round_trips_it_was_not_fitted_on() -> None:
    # Fitted on CloudPing's AWS medians; the other sources' rows are held out. Today 19 of 27 come within
    # 20 %; the misses are short hops inside Europe (up to +62 %: the fitted constants at the ends weigh on
    # a 12 ms round trip) and straight ocean crossings (+22-25 %). docs/benchmarks.md has each row.
    rows = [r for r in csv.DictReader(ROWS.open(encoding="utf-8")) if r["source_id"] != "cloudping_aws"]
    errors = [paths.path(resolve(r["from"]), resolve(r["to"])).rtt_ms() / float(r["rtt_ms"]) - 1 for r in rows]
    assert len(rows) >= 25
    assert sum(abs(e) <= 0.20 for e in errors) >= 0.7 * len(rows), errors
    assert all(abs(e) <= 0.7 for e in errors), errors
