"""`firsttoken demo` end to end: two simulated regions and a gateway, the tour's seven steps each showing
what it says it shows (read from the gateway's own journeys), and nothing left running afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from firsttoken.demo import STALL_S
from support.gateway_process import free_port


def test_the_tour_shows_each_part_of_the_journey_and_leaves_nothing_running(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "firsttoken", "demo", "--port", str(free_port()), "--pace", "0",
                           "--json"], capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    tour = json.loads(done.stdout)
    steps = {step["title"]: step["facts"] for step in tour["steps"]}
    assert list(steps) == ["A cold start", "A warm request", "A burst of 48", "The same question again",
                           "In other words", "A hedge", "From Lagos to Virginia"]
    assert steps["A cold start"]["cold_ms"] > 5000  # an 8B model loaded back onto an H100
    warm = steps["A warm request"]
    assert warm["rtt_ms"] == pytest.approx(129, abs=5) and warm["connect_ms"] == 0
    assert warm["verdict"].startswith("most of this wait was distance")
    assert steps["A burst of 48"]["queue_prefill_max_ms"] > 10 * warm["queue_prefill_ms"]
    assert steps["The same question again"]["cache"] == "hit"
    assert steps["In other words"]["cache"].startswith("semantic-hit; similarity=")
    hedge = steps["A hedge"]
    # The hedge won the race: its first token came before the stalling region's would have, however busy the machine.
    assert hedge["hedge"] == "hedge-of=frankfurt/llama-3.1-8b" and hedge["ttft_ms"] < STALL_S * 1000
    assert steps["From Lagos to Virginia"]["floor_ms"] == pytest.approx(86, abs=2)
    assert "Watch it on the dashboard: http://127.0.0.1:" in done.stderr
    for pid in tour["pids"]:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not list(tmp_path.iterdir())  # its files were in a directory of its own, removed
