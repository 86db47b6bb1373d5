"""The router's state for GET /metrics and GET /v1/routing, read when asked (nothing on the request path):
per target, the expected time to first token, requests in flight, whether its circuit is open, its
cold-start penalty; and how many hedges went out and won, and keep-warm pings sent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from firsttoken.routing.health import State
from firsttoken.routing.keepwarm import KeepWarm
from firsttoken.routing.router import Router, TargetState


class RoutingCollector(Collector):
    def __init__(self, router: Router, keep_warm: KeepWarm) -> None:
        self.router = router
        self.keep_warm = keep_warm

    def collect(self) -> Iterator[Metric]:
        now = self.router.clock()
        expected = GaugeMetricFamily("firsttoken_target_expected_ttft_seconds", "The router's expected time to "
                                     "first token per target (stream) or to a whole answer (whole).",
                                     labels=["target", "kind"])
        in_flight = GaugeMetricFamily("firsttoken_target_in_flight", "Requests under way per target.",
                                      labels=["target"])
        breaker = GaugeMetricFamily("firsttoken_target_circuit_open", "1 while a target's circuit breaker is open "
                                    "or half-open.", labels=["target"])
        cold = GaugeMetricFamily("firsttoken_target_cold_start_penalty_seconds", "The median extra wait for the "
                                 "first token after the target's model was unloaded.", labels=["target"])
        for state in self.router.states():
            label = state.target.label
            expected.add_metric([label, "stream"], state.streams.value(now) / 1000)
            expected.add_metric([label, "whole"], state.answers.value(now) / 1000)
            in_flight.add_metric([label], state.in_flight)
            breaker.add_metric([label], 0 if state.health.state is State.CLOSED else 1)
            if state.cold.penalty_ms is not None:
                cold.add_metric([label], state.cold.penalty_ms / 1000)
        hedges = CounterMetricFamily("firsttoken_hedges", "Hedged requests by outcome: the hedge won, or the "
                                     "first target did.", labels=["winner"])
        hedges.add_metric(["hedge"], self.router.hedges_won)
        hedges.add_metric(["first"], self.router.hedges_sent - self.router.hedges_won)
        pings = CounterMetricFamily("firsttoken_keep_warm_pings", "Keep-warm requests sent.")
        pings.add_metric([], self.keep_warm.sent)
        yield from (expected, in_flight, breaker, cold, hedges, pings)


def target_view(router: Router, state: TargetState, keep_warm: KeepWarm) -> dict[str, Any]:
    """One target as GET /v1/routing reports it."""

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value, 1)

    now = router.clock()
    return {"target": state.target.label, "in_flight": state.in_flight, "breaker": state.health.state.value,
            "expected_ttft_ms": {"stream": ms(state.streams.value(now)), "whole": ms(state.answers.value(now))},
            "ttft_p90_ms": ms(state.streams.percentile(90)), "idle_s": ms(router.idle_for(state)),
            "cold_start": {"penalty_ms": ms(state.cold.penalty_ms), "seen": state.cold.seen,
                           "unloads_after_s": ms(state.cold.unloads_after_s)},
            "keep_warm_pings_last_hour": len(keep_warm.pings.get(state.target.label, ()))}
