"""One option under the scenario's traffic, in virtual time: every request's journey from the user's send to
its last token back.

Self-hosted options run the simulated region's own engine (sim/engine.py: continuous batching, chunked
prefill, the KV cache's bound, roofline step times), the one the live region plays in real time
(sim/replica.py); here SimPy plays it with no sleeping, each replica a process that runs a step, waits out
its duration in virtual time, and sleeps when its engine has nothing to run. Requests go to the replica
with the fewest in it. Provider APIs answer as their published profile says: a first token a log-normal
time after the request arrives (its median the profile's), then one token per `itl_ms`.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from firsttoken.plan.network import Route, route
from firsttoken.plan.scenario import Option, ProviderApi, Scenario, SelfHosted
from firsttoken.plan.workload import draw
from firsttoken.sim.engine import Engine, Sequence

API_TTFT_SIGMA = 0.25  # the spread of a provider's time to first token around its median (of the log), chosen


@dataclass(slots=True)
class Journey:
    """One request, its times in virtual seconds from the start of the run."""

    city: int  # index into the scenario's cities
    route: Route
    prompt: int
    answer: int
    sent: float  # the user pressed send
    handshakes_s: float  # paid before the request could leave (0 on a connection already open)
    arrived: float = 0.0  # at the option
    admitted: float = 0.0  # a replica started on it (its queue ends)
    first_token: float = 0.0  # at the option
    finished: float = 0.0  # its last token, at the option
    refused: bool = False  # it could never fit the replica's KV cache

    @property
    def one_way_s(self) -> float:
        return self.route.rtt_ms / 2000


@dataclass
class Run:
    option: Option
    journeys: list[Journey]
    busy_s: float  # of all replicas' time, what they spent running steps (0 for an API)
    replicas: int
    ended: float  # when the last answer was done: past the traffic's end when a queue had to drain


def traffic(scenario: Scenario, routes: list[Route]) -> list[Journey]:
    """The requests the users send during the run: Poisson arrivals, each from a city drawn by its share,
    on a connection already open with the scenario's `reuse` probability. The same seed draws the same
    traffic for every option, so options are compared on identical requests."""
    rng = np.random.default_rng(scenario.seed)
    users = scenario.users
    expected = users.rate_per_s * scenario.duration_s
    gaps = rng.exponential(1 / users.rate_per_s, int(expected + 10 * np.sqrt(expected) + 10))
    sent = np.cumsum(gaps)
    sent = sent[sent < scenario.duration_s]
    shares = np.array([c.share for c in users.cities])
    cities = rng.choice(len(shares), size=len(sent), p=shares / shares.sum())
    reused = rng.random(len(sent)) < users.reuse
    prompts, answers = draw(scenario.workload.preset, len(sent), rng)
    return [Journey(int(c), routes[c], int(p), int(a), float(t), 0.0 if warm else routes[c].handshakes_ms / 1000)
            for c, p, a, t, warm in zip(cities, prompts, answers, sent, reused, strict=True)]


def routes_to(scenario: Scenario, option: Option) -> list[Route]:
    users = scenario.users
    return [route(city.where, option.where, scenario.path_factor,
                  users.last_mile_ms if city.last_mile_ms is None else city.last_mile_ms)
            for city in users.cities]


def simulate(scenario: Scenario, option: Option) -> Run:
    journeys = traffic(scenario, routes_to(scenario, option))
    for journey in journeys:
        journey.arrived = journey.sent + journey.handshakes_s + journey.one_way_s
    journeys.sort(key=lambda j: j.arrived)
    busy, replicas = 0.0, 0
    if option.self_hosted is not None:
        busy, replicas = _self_hosted(option.self_hosted, journeys), option.self_hosted.replicas
    else:
        assert option.api is not None
        _api(option.api, journeys, np.random.default_rng(scenario.seed + 1))
    ended = max((j.finished for j in journeys), default=0.0)
    return Run(option, journeys, busy, replicas, max(ended, scenario.duration_s))


class _Replica:
    """A replica's engine as a SimPy process: sim/replica.py's loop, in virtual time."""

    def __init__(self, env: simpy.Environment, engine: Engine) -> None:
        self.env, self.engine = env, engine
        self.busy_s = 0.0
        self._wake: simpy.Event | None = None
        env.process(self._run())

    @property
    def load(self) -> int:
        return len(self.engine.waiting) + len(self.engine.running)

    def submit(self, sequence: Sequence) -> None:
        self.engine.submit(sequence)
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _run(self) -> Generator[simpy.Event, Any, None]:
        while True:
            if not self.engine.busy:
                self._wake = self.env.event()
                yield self._wake
            step = self.engine.step(self.env.now)
            if step is None:  # nothing admissible: submit() refuses what could never fit, so it cannot last
                yield self.env.timeout(0.001)
                continue
            self.busy_s += step.duration
            yield self.env.timeout(step.duration)


def _self_hosted(hosted: SelfHosted, journeys: list[Journey]) -> float:
    env = simpy.Environment()
    deployment = hosted.deployment
    replicas = [_Replica(env, Engine(deployment)) for _ in range(hosted.replicas)]
    sequences: list[tuple[Journey, Sequence]] = []

    def arrivals() -> Generator[simpy.Event, Any, None]:
        for journey in journeys:
            if journey.arrived > env.now:
                yield env.timeout(journey.arrived - env.now)
            sequence = Sequence(journey.prompt, journey.answer, env.now)
            try:
                min(replicas, key=lambda r: r.load).submit(sequence)
            except ValueError:  # larger than the KV cache could ever hold
                journey.refused = True
                continue
            sequences.append((journey, sequence))

    env.process(arrivals())
    env.run()
    for journey, sequence in sequences:
        assert sequence.admitted_at is not None and sequence.first_token_at is not None
        assert sequence.finished_at is not None
        journey.admitted, journey.first_token = sequence.admitted_at, sequence.first_token_at
        journey.finished = sequence.finished_at
    return sum(r.busy_s for r in replicas)


def _api(api: ProviderApi, journeys: list[Journey], rng: np.random.Generator) -> None:
    ttfts = rng.lognormal(np.log(api.ttft_ms / 1000), API_TTFT_SIGMA, len(journeys))
    for journey, ttft in zip(journeys, ttfts, strict=True):
        journey.admitted = journey.arrived
        journey.first_token = journey.arrived + float(ttft)
        journey.finished = journey.first_token + (journey.answer - 1) * api.itl_ms / 1000
