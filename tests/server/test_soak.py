"""The soak, bounded for CI (FIRSTTOKEN_SOAK_S, 60 s by default; bench/soak.py runs it for as long as asked):
mixed load with cancelled streams, slow readers and clients that never read. No answer a well-behaved client
asked for is lost; once the load stops, the gateway's open file descriptors and asyncio tasks are back where
they were; and its resident memory stays within the allocator's swings of the first half's peak (half an
hour of it holds at about 330 MiB: docs/reliability.md, "Soak"). CI's minute finds what a request leaks
(a descriptor, a task, a lost answer: each of hundreds of requests would leave one) and memory that runs
away; a slow drift in memory is for the half hour of bench/soak.py, with its slope per hour."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import ADMIN, CLIENT_KEY, gateway_settings
from support.gateway_process import GatewayProcess
from support.soak import FDS_LEFT, TASKS_LEFT, Soak

SECONDS = float(os.environ.get("FIRSTTOKEN_SOAK_S", "60"))
# Between two trims (every 10 s) the 500 KB prompts and answers swing resident memory by 20-30 MiB
RSS_ABOVE_EARLY_PEAK_MIB = 64


def soak_settings(upstream_url: str) -> dict:
    settings = gateway_settings(upstream_url)
    # As shipped (the exact and semantic cache on), but with the bounded structures small, so that they are
    # full within the first half of CI's minute (about ten requests a second, most of them new questions, half
    # that on a busy machine): what grows after that is a leak, not a cache filling.
    settings["cache"] = {"max_prompts": 100}
    settings["journeys"] = {"recent": 100}
    settings["models"]["slow"] = ["fake/slow-stream"]
    settings["limits"]["max_body_bytes"] = 2 * 1024 * 1024
    settings["streaming"] = {**settings.get("streaming", {}), "client_stall_s": 5}  # never-readers go in 5 s
    # The test upstream shares its process (and the GIL) with eight soak clients, on a machine running the rest
    # of the suite: the suite's 2 s first-byte timeout could go by while it was starved, a 504 the gateway
    # rightly gave and the soak counted lost. Nothing here waits on an upstream timeout.
    settings["upstreams"]["fake"]["timeouts"] = {"first_byte": 15.0, "idle": 15.0}
    return settings


@pytest.mark.timeout(SECONDS + 240)
def test_a_soak_loses_nothing_and_leaks_nothing(upstream, tmp_path: Path) -> None:
    with GatewayProcess(soak_settings(upstream.url), tmp_path) as gateway:
        result = Soak(gateway.url, {"authorization": f"Bearer {CLIENT_KEY}"}, ADMIN, SECONDS).run()
        log = gateway.log()
    print(result.report())
    assert not result.lost, result.lost[:10]
    assert set(result.asked) == {"whole", "stream", "repeat", "cancelled", "slow reader", "never reads"}
    before, settled = result.before, result.settled
    assert before is not None and settled is not None
    assert settled.fds <= before.fds + FDS_LEFT, result.report()
    assert settled.tasks <= before.tasks + TASKS_LEFT, result.report()
    middle = len(result.samples) // 2
    early_peak = max(s.rss for s in result.samples[:middle])
    late_peak = max(s.rss for s in result.samples[middle:])
    assert late_peak <= early_peak + RSS_ABOVE_EARLY_PEAK_MIB * 2**20, result.report()
    assert "Traceback" not in log
