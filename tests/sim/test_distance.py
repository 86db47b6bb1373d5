"""Distance in the region: each direction pays the fibre path's propagation, on absolute deadlines."""

from __future__ import annotations

import statistics
import time

import openai
import pytest

from firsttoken.geo import physics
from firsttoken.geo.places import resolve
from support.sim_region import region_on_loopback

from .test_server import server_timing

MESSAGES = [{"role": "user", "content": "hello from Lagos"}]


def test_lagos_to_virginia_costs_the_fibre_round_trip() -> None:
    with region_on_loopback(models=["llama-3.2-1b"], region="aws:us-east-1", client_location="lagos") as (
            port, region):
        lagos, ashburn = resolve("lagos"), resolve("aws:us-east-1")
        one_way = physics.fibre_one_way_s(
            physics.great_circle_km(lagos.lat, lagos.lon, ashburn.lat, ashburn.lon), physics.DEFAULT_PATH_FACTOR)
        assert region.one_way_s == pytest.approx(one_way) and 0.055 < one_way < 0.075
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
        client.models.list()  # the connection is open: what follows is the requests' journey
        ttfbs, spacings = [], []
        for _ in range(3):  # the best of three: the client shares this process (and its GIL) with the region
            started = time.perf_counter()
            with client.chat.completions.with_streaming_response.create(
                    model="llama-3.2-1b", messages=MESSAGES, max_tokens=20, stream=True) as response:
                ttfbs.append(time.perf_counter() - started)
                lines = [time.perf_counter() for line in response.iter_lines() if line.startswith("data: {")]
                spacings.append((lines[-1] - lines[1]) / (len(lines) - 2))
        timing = server_timing(response.headers["server-timing"])
        assert timing["distance"] == pytest.approx(2 * one_way * 1000, abs=0.01)
        floor = 2 * one_way + (timing["queue"] + timing["prefill"]) / 1000
        # no byte before both crossings; and, of the best of three, not a third crossing either (a busy
        # machine may delay each of them, by far less than the 65 ms one more would cost)
        assert floor <= min(ttfbs) < floor + one_way
        # the way back delays every token equally: their spacing is the engine's alone (the typical of three:
        # one read a busy machine delayed says nothing about the region)
        decode = region.settings.deployments["llama-3.2-1b"].decode_step_s(30, 1)
        assert statistics.median(spacings) == pytest.approx(decode, rel=0.35, abs=0.001)


def test_no_distance_without_both_ends() -> None:
    with region_on_loopback(models=["llama-3.2-1b"], region="aws:us-east-1") as (port, region):
        assert region.one_way_s == 0
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(model="llama-3.2-1b", messages=MESSAGES, max_tokens=1)
        assert "distance" not in server_timing(raw.headers["server-timing"])
