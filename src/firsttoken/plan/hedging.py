"""Hedging at the gateway: when an option's first token has not come back within `after_ms` of the
request leaving the gateway, the gateway sends it to a provider's API as well, and whichever first token
reaches the gateway first is the answer (the other request is cancelled). As the live gateway hedges slow
first tokens (routing/hedge.py), between options here.

The hedge's target is an API, whose answers do not depend on its load, so the primary's run is simulated
first and the hedges worked out after it. The primary's own work is not taken back when the hedge wins: a
self-hosted option's GPUs are counted as if it ran to the end (an upper bound on its load), and an API
primary bills as if it had answered.
"""

from __future__ import annotations

import numpy as np

from firsttoken.plan import provider
from firsttoken.plan.journey import Journey
from firsttoken.plan.network import Route
from firsttoken.plan.scenario import Option


def hedge(journeys: list[Journey], target: Option, after: float, far: Route, rng: np.random.Generator) -> None:
    """Hedges the slow ones of `journeys` (an option's own, not answered at the gateway) to `target`, `after`
    seconds without a first token; `far` is the way from the gateway to the target."""
    api = target.api
    assert api is not None
    # one draw per journey whether it is hedged or not: the same traffic draws the same provider times
    ttfts = provider.first_token_s(api, len(journeys), rng)
    for journey, ttft in zip(journeys, ttfts, strict=True):
        assert journey.far is not None
        half = journey.far.rtt_ms / 2000
        waited = journey.far_rounds * journey.far.rtt_ms / 1000  # the long way's slow start
        left, back = journey.arrived - half - waited, journey.first_token + half  # at the gateway: out, and in
        if back - left <= after:
            continue
        journey.hedged = True
        hedge_waits = journey.far_rounds * far.rtt_ms / 1000  # the same prompt's slow start on the hedge's way
        there = left + after + far.rtt_ms / 2000 + hedge_waits
        if there + float(ttft) + far.rtt_ms / 2000 < back:  # the hedge's first token is back first
            journey.hedge_won = True
            journey.gateway_s += after  # the gateway held it that long before the request that answered left
            journey.slow_start_s += hedge_waits - waited
            journey.far, journey.arrived, journey.admitted, journey.cold_s = far, there, there, 0.0
            journey.front_end_s = 0.0  # an API's own time is in its first token's
            journey.first_token = there + float(ttft)
            journey.finished = journey.first_token + (journey.answer - 1) * api.itl_ms / 1000
