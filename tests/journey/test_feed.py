"""The live feed of journeys (the dashboard's): every journey under a light load, a weighted sample with
every failure under a heavy one, and a watcher that reads too slowly loses its oldest events, not memory."""

from __future__ import annotations

import asyncio
import json

import pytest

from firsttoken.journey.attribution import phases
from firsttoken.journey.feed import LIVE_PER_S, WATCHER_BACKLOG, JourneyFeed
from firsttoken.journey.timeline import Timeline


def finished(n: int, failing_every: int = 0) -> list:
    batch = []
    for i in range(n):
        timeline = Timeline(f"req_{i}")
        timeline.status = 502 if failing_every and i % failing_every == 0 else 200
        timeline.tenant, timeline.last_byte = "default", timeline.received + 0.1
        batch.append((timeline, phases(timeline)[0], 1_800_000_000.0 + i))
    return batch


def journeys(events: list[bytes]) -> list[dict]:
    return [json.loads(e.split(b"\ndata: ", 1)[1]) for e in events]


def test_a_light_load_is_sent_whole_and_a_heavy_one_as_a_weighted_sample() -> None:
    async def run() -> None:
        feed = JourneyFeed(batch_s=0.1)
        watcher = feed.watch()
        feed.publish(finished(5))
        light = journeys(await watcher.next_events(1))
        assert [j["request_id"] for j in light] == [f"req_{i}" for i in range(5)]
        assert all(j["weight"] == 1 for j in light)
        feed.publish(finished(2000, failing_every=100))  # 20 000 a second
        heavy = journeys(await watcher.next_events(1))
        failures = [j for j in heavy if j["status"] >= 400]
        assert len(failures) == 20 and all("weight" not in j for j in failures)  # every failure, as itself
        assert len(heavy) <= max(LIVE_PER_S * 0.1, 20 + 1)
        assert sum(j.get("weight", 1) for j in heavy) == pytest.approx(2000, rel=0.01)
        feed.leave(watcher)
        assert not feed.watched

    asyncio.run(run())


def test_a_slow_watcher_loses_its_oldest_events() -> None:
    async def run() -> None:
        feed = JourneyFeed(batch_s=0.1)
        watcher = feed.watch()
        for _ in range(WATCHER_BACKLOG // 10 + 50):
            feed.publish(finished(10))
        kept = await watcher.next_events(1)
        assert len(kept) == WATCHER_BACKLOG and watcher.dropped == 500
        assert await watcher.next_events(0.01) == []  # nothing more: a wait that ends empty

    asyncio.run(run())
