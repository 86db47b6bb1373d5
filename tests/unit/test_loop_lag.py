"""The alarms' ticker measures how late the event loop ran it: a loop blocked for a while shows as a tick
at least that late, in the histogram /metrics serves, and is logged."""

from __future__ import annotations

import asyncio
import logging
import time

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from firsttoken.alarms import Alarms
from firsttoken.server.process_metrics import LoopLagCollector

BLOCKED_S = 0.6  # past STALL_S, so that it is logged too


async def test_a_blocked_loop_shows_as_a_late_tick(caplog) -> None:
    alarms = Alarms()
    alarms.start()
    await asyncio.sleep(0)  # the ticker is asleep, due a resolution from now
    with caplog.at_level(logging.WARNING, logger="firsttoken.alarms"):
        time.sleep(BLOCKED_S)  # what a blocking call on the loop does to every request
        while sum(alarms.lag.counts) == 0:
            await asyncio.sleep(0.01)
    await alarms.close()
    assert alarms.lag.worst >= BLOCKED_S - alarms.resolution
    assert "the event loop was blocked for" in caplog.text
    registry = CollectorRegistry()
    registry.register(LoopLagCollector(alarms.lag))
    buckets = {sample.labels["le"]: sample.value
               for family in text_string_to_metric_families(generate_latest(registry).decode())
               for sample in family.samples if sample.name == "firsttoken_event_loop_lag_seconds_bucket"}
    assert buckets["+Inf"] - buckets["0.5"] >= 1  # the blocked tick; others, if any, may be on time
