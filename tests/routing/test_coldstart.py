"""Cold starts learned from first tokens: counted for the whole life of the gateway, not only the latest."""

from __future__ import annotations

from firsttoken.routing.coldstart import ColdStarts


def test_every_cold_start_is_counted_while_only_the_latest_are_kept() -> None:
    cold = ColdStarts()
    for _ in range(5):
        cold.observe(100.0, idle_s=0.1)  # warm
    for _ in range(20):
        cold.observe(5000.0, idle_s=30.0)  # a long pause, then a first token fifty times later: cold
    assert cold.seen == 20 and len(cold.cold) == 16
    assert cold.penalty_ms == 4900.0 and cold.unloads_after_s == 30.0
    cold.observe(5000.0, idle_s=0.2)  # slow without a pause: a queue, not a cold start
    assert cold.seen == 20
