"""One request, told twice: by `firsttoken trace` through a gateway (from its Server-Timing), and by the
gateway's own journey of it. The two must name the same largest part of the wait and the same phases."""

from __future__ import annotations

from support.measure import BUSY_MS, PREFILL_SLACK_MS


def verdict_kind(verdict: str) -> str:
    """"most of this wait was distance: a 129 ms round trip…" → "most of this wait was distance"."""
    return verdict.partition(":")[0]


def assert_one_story(run: dict, journey: dict) -> None:
    phases = journey["phases"]
    assert run["request_id"] == journey["request_id"]
    assert verdict_kind(run["verdict"]) == verdict_kind(journey["verdict"]), (run["verdict"], journey["verdict"])
    assert run["cache"] == journey["cache"]
    # The trace's round trip is its own leg to the gateway (loopback here: well under a ms, more on a busy
    # machine, whose delays only add) and the gateway's, as declared.
    assert phases["rtt"] <= run["rtt_ms"] <= phases["rtt"] + BUSY_MS, (run["rtt_ms"], phases["rtt"])
    assert run["floor_ms"] == phases["floor"]
    # The trace's queue+prefill also holds relaying the first byte back over loopback: a ms, on a busy machine
    # more (it only adds), and neither a round trip missed nor one counted twice.
    assert -PREFILL_SLACK_MS <= run["queue_prefill_ms"] - phases["queue+prefill"] <= PREFILL_SLACK_MS + BUSY_MS, \
        (run, phases)
