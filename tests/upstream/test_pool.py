"""How many probes a keep-warm round sends: the missing warm connections and the idle ones traffic left
alone, never the ones it keeps busy."""

from __future__ import annotations

from firsttoken.upstream.pool import probes_needed


def test_a_pool_with_none_open_opens_them_all() -> None:
    assert probes_needed(4, 0, [], 10.0) == 4


def test_connections_traffic_uses_need_no_probe() -> None:
    assert probes_needed(4, 2, [0.5, 3.0], 10.0) == 0  # two busy, two given back lately
    assert probes_needed(4, 4, [], 10.0) == 0


def test_idle_connections_are_probed_once_traffic_has_left_them_long_enough() -> None:
    assert probes_needed(4, 1, [0.5, 12.0, 30.0], 10.0) == 2
    assert probes_needed(4, 0, [20.0, 20.0, 20.0, 20.0], 10.0) == 4  # nobody calling: all of them


def test_missing_ones_are_opened_even_beside_fresh_idle_ones() -> None:
    # a probe takes an idle connection before it opens a new one: every idle one is taken, so that the
    # other probes open the two that are missing
    assert probes_needed(8, 0, [1.0] * 6, 10.0) == 8
    assert probes_needed(4, 1, [12.0], 10.0) == 3


def test_extra_idle_connections_are_not_kept_warm() -> None:
    assert probes_needed(2, 0, [30.0] * 6, 10.0) == 2  # a peak's leftovers: only the warm ones are kept
