"""Great circles and light in glass, checked against published distances."""

from __future__ import annotations

import pytest

from firsttoken.geo import physics


def test_great_circle_matches_published_distances() -> None:
    # London–New York 5 570 km, Lagos–London 5 000 km (great-circle calculators, ±1 %)
    assert physics.great_circle_km(51.5074, -0.1278, 40.7128, -74.0060) == pytest.approx(5570, rel=0.01)
    assert physics.great_circle_km(6.4541, 3.3947, 51.5074, -0.1278) == pytest.approx(5000, rel=0.01)
    assert physics.great_circle_km(0, 0, 0, 180) == pytest.approx(20015, rel=0.001)  # half the equator
    assert physics.great_circle_km(10, 20, 10, 20) == 0


def test_light_in_fibre() -> None:
    assert physics.FIBRE_KM_PER_S == pytest.approx(204_000, rel=0.01)  # about 4.9 µs per km
    assert physics.floor_rtt_ms(1000) == pytest.approx(9.8, abs=0.1)
    assert physics.fibre_one_way_s(1000, 1.5) == pytest.approx(0.00735, rel=0.01)
    with pytest.raises(ValueError):
        physics.fibre_one_way_s(1000, 0.9)
