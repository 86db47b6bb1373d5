"""One option under the scenario's traffic, in virtual time: every request's journey from the user's send to
its last token back.

Self-hosted options run the simulated region's own engine (sim/engine.py: continuous batching, chunked
prefill, the KV cache's bound, roofline step times), the one the live region plays in real time
(sim/replica.py); here SimPy plays it with no sleeping, each replica a process that runs a step (or, while
its sequences all decode, a run of them), waits out its duration in virtual time, and sleeps when its
engine has nothing to run. Requests go to the replica with the fewest in it, once the serving stack's front
end is done with them (plan/serving.py). Provider APIs answer at their published pace (plan/provider.py).
A gateway answers what its caches hold, looks up the rest, sends the kinds it sizes down to a smaller
model (another option, served beside this one) and hedges slow first tokens to an API option
(plan/hedging.py). Long prompts wait for TCP's window on each long leg (plan/network.py).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Collection, Generator, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from firsttoken.plan import provider, serving
from firsttoken.plan.hedging import hedge
from firsttoken.plan.journey import Journey
from firsttoken.plan.network import REQUEST_OVERHEAD_BYTES, Route, slow_start_round_trips
from firsttoken.plan.scenario import Gateway, Option, Scenario, SelfHosted
from firsttoken.plan.workload import draw
from firsttoken.sim.engine import Engine, Sequence
from firsttoken.sim.prefix_cache import BLOCK, PrefixCache

# A repeated question answered from the gateway's edge cache: its exact hit's time end to end, measured at
# 0.13–0.16 ms p50 (docs/benchmarks.md), rounded up; the answer goes out whole at once, streamed or not.
CACHE_HIT_S = 0.0005
# A question asked before in other words: the gateway embeds it and looks it up while the request is on its
# way, and answers when it finds it first. MiniLM on one core: 4 ms and 0.3 ms a token more, up to the 256
# it reads, and the hit's replay (bench/gateway_phase.py: a 10-word paraphrase answered in 14.5 ms, a
# 150-word one in 63 ms). A miss waits for none of it. Of GPTCache's 999 paraphrase pairs the cache serves
# 863 at its default threshold (859 right, 4 wrong: bench/cache_quality.py) and misses 136.
SEMANTIC_FIXED_S = 0.006
SEMANTIC_PER_TOKEN_S = 0.0003
SEMANTIC_READ_TOKENS = 256
SEMANTIC_SERVED = 863 / 999


def semantic_hit_s(prompt_tokens: int) -> float:
    """How long a paraphrase takes to be found and answered, by its prompt's length."""
    return SEMANTIC_FIXED_S + SEMANTIC_PER_TOKEN_S * min(prompt_tokens, SEMANTIC_READ_TOKENS)


@dataclass
class Served:
    """What an option spent on the requests it answered."""

    until: float  # when its replicas were last counted: its share of time loaded is loaded_s / until
    busy_s: float = 0.0  # of all replicas' time, what they spent running steps (0 for an API)
    loaded_s: float = 0.0  # of all replicas' time, what they had the model loaded (billed): 0 for an API
    cold_starts: int = 0


@dataclass
class Run:
    option: Option
    journeys: list[Journey]
    served: Served  # what the option spent (its `until` ≤ ended: the sized-down requests may drain later)
    replicas: int
    ended: float  # when the last answer was done: past the traffic's end when a queue had to drain
    sized_to: Option | None = None  # the option the gateway sized requests down to
    sized: Served | None = None  # and what it spent on them


def traffic(scenario: Scenario, routes: list[Route]) -> list[Journey]:
    """The requests the users send during the run: arrivals from each city as its share and its clock say
    (plan/arrivals.py), on a connection already open with the scenario's `reuse` probability, a repeat of
    an earlier question with the workload's `repeats`. The same seed draws the same traffic for every
    option, so options are compared on identical requests."""
    rng = np.random.default_rng(scenario.seed)
    users = scenario.users
    sent, cities = users.arrivals(scenario.start).draw(scenario.duration_s, rng,
                                                       np.random.default_rng([scenario.seed, 1]))
    workload = scenario.workload
    reused = rng.random(len(sent)) < users.reuse
    repeats = rng.random(len(sent)) < workload.repeats
    kinds = workload.kinds
    if len(kinds) == 1:
        prompts, answers = draw(kinds[0][0], len(sent), rng, workload.lengths)
        kind_of = np.zeros(len(sent), dtype=np.int64)
    else:  # each request's kind by the mix's shares, then its lengths as its kind's
        kind_of = np.random.default_rng([scenario.seed, 2]).choice(len(kinds), len(sent), p=[s for _, s in kinds])
        drawn = [draw(kind, len(sent), rng) for kind, _ in kinds]
        prompts, answers = (np.choose(kind_of, [d[i] for d in drawn]) for i in (0, 1))
    shared = [workload.shared_prefix_of(kind) for kind, _ in kinds]
    # drawn after everything else, so that a scenario without paraphrases draws the traffic it always did
    paraphrased = ~repeats & (rng.random(len(sent)) < workload.paraphrases)
    recalled = paraphrased & (rng.random(len(sent)) < SEMANTIC_SERVED)
    return [Journey(int(c), routes[c], int(p), int(a), float(t), 0.0 if warm else routes[c].handshakes_ms / 1000,
                    bool(again), bool(other_words), bool(found), kind=kinds[k][0], prefix=min(shared[k], int(p) - 1))
            for c, p, a, t, warm, again, other_words, found, k
            in zip(cities, prompts, answers, sent, reused, repeats, paraphrased, recalled, kind_of.tolist(),
                   strict=True)]


def routes_to(scenario: Scenario, option: Option) -> list[Route]:
    """From each city to the option's first stop: its gateway when it has one."""
    users = scenario.users
    first = option.gateway.where if option.gateway is not None else option.where
    return [scenario.way(city.where, first, users.last_mile_ms if city.last_mile_ms is None else city.last_mile_ms)
            for city in users.cities]


@contextlib.contextmanager
def _rare_collections() -> Iterator[None]:
    """A day's run holds a million journeys, and the cycle collector's passes over them at its default pace
    cost an eighth of the run (measured: 60.8 s against 52.8 s for bench/plan_speed.py's day). What the
    run makes is mostly acyclic (journeys, sequences, SimPy's events), so collections can be rarer."""
    before = gc.get_threshold()
    gc.set_threshold(100_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def simulate(scenario: Scenario, option: Option, fast: bool = True) -> Run:
    """The scenario's traffic sent to one option: each journey's times filled in, and what the option spent.
    `fast=False` steps the engine one step at a time (the reference skipping ahead is tested against)."""
    with _rare_collections():
        return _simulate(scenario, option, fast)


def _simulate(scenario: Scenario, option: Option, fast: bool) -> Run:
    journeys = traffic(scenario, routes_to(scenario, option))
    gateway = option.gateway
    smaller = None
    if gateway is not None:
        _through_gateway(journeys, gateway, scenario.way(gateway.where, option.where, 0.0))
        if gateway.sizing is not None:
            smaller = scenario.sizing_target(gateway.sizing)
            _size_down(journeys, gateway.sizing.kinds, scenario.way(gateway.where, smaller.where, 0.0))
    _slow_start(journeys, scenario.workload.bytes_per_token, gateway)
    upstream = []
    for journey in journeys:
        journey.arrived = (journey.sent + journey.handshakes_s + journey.one_way_s + journey.slow_start_s
                           + journey.gateway_s)
        if journey.from_cache:  # the edge cache has it, in these words or in others
            journey.admitted = journey.arrived
            journey.first_token = journey.finished = journey.arrived + (0.0 if journey.recalled else CACHE_HIT_S)
        else:
            upstream.append(journey)
    ended = max(max((j.arrived for j in journeys), default=0.0), scenario.duration_s)
    own = [j for j in upstream if not j.sized] if smaller is not None else upstream
    served = _serve(option, own, ended, fast, np.random.default_rng(scenario.seed + 1))
    sized = None
    if smaller is not None:
        sized = _serve(smaller, [j for j in upstream if j.sized], served.until, fast,
                       np.random.default_rng(scenario.seed + 3))
    if gateway is not None and gateway.hedge is not None:
        target = scenario.hedge_target(gateway.hedge)
        assert target is not None  # the scenario checked it names an api: option
        hedge(own, target, gateway.hedge.after_ms / 1000, scenario.way(gateway.where, target.where, 0.0),
              np.random.default_rng(scenario.seed + 2))
    ended = max(served.until, sized.until if sized is not None else 0.0,
                max((j.finished for j in journeys), default=0.0))
    replicas = option.self_hosted.replicas if option.self_hosted is not None else 0
    return Run(option, journeys, served, replicas, ended, smaller, sized)


def _serve(option: Option, journeys: list[Journey], until: float, fast: bool, rng: np.random.Generator) -> Served:
    """The journeys answered by the option (its replicas, or its API), in the order they reach its engine:
    what it spent, until no earlier than `until`."""
    hosted = option.self_hosted
    front_end = hosted.front_end if hosted is not None else serving.stack("none")  # an API's is in its TTFT
    for journey in journeys:
        journey.front_end_s = front_end.seconds(journey.prompt)
    journeys.sort(key=lambda j: j.arrived + j.front_end_s)
    if hosted is None:
        assert option.api is not None
        provider.answer(option.api, journeys, rng)
        return Served(until)
    return _self_hosted(hosted, journeys, until, fast)


def _size_down(journeys: list[Journey], kinds: Collection[str], way: Route) -> None:
    """Task sizing: the gateway sends the requests of `kinds` it does not answer itself the `way` to the
    smaller option."""
    for journey in journeys:
        if not journey.from_cache and journey.kind in kinds:
            journey.sized, journey.far = True, way


def _slow_start(journeys: list[Journey], bytes_per_token: float, gateway: Gateway | None) -> None:
    """The round trips each request waits on each leg for TCP's window to open: from the user's initial
    window, and from the gateway's on the long way."""
    if not journeys:
        return
    sizes = np.array([j.prompt for j in journeys]) * bytes_per_token + REQUEST_OVERHEAD_BYTES
    near = slow_start_round_trips(sizes)
    far = slow_start_round_trips(sizes, gateway.initial_window) if gateway is not None else near
    for index in np.flatnonzero(near + far).tolist():  # most prompts fit the first window: left at 0
        journey = journeys[index]
        journey.far_rounds = int(far[index]) if journey.far is not None else 0
        waited = near[index] * journey.near.rtt_ms + (journey.far_rounds * journey.far.rtt_ms if journey.far else 0.0)
        journey.slow_start_s = float(waited) / 1000


def _through_gateway(journeys: list[Journey], gateway: Gateway, far: Route) -> None:
    """What a gateway does to each journey: answers it from its edge cache (an exact repeat, or a paraphrase
    its semantic cache finds), or forwards it and sends it on the long way, a data centre to a data centre:
    no last mile there. A miss does not wait for the semantic lookup: it races the upstream."""
    forwarding = serving.stack(serving.GATEWAY)
    for journey in journeys:
        journey.from_cache = gateway.cache and (journey.repeat or journey.recalled)
        journey.far = None if journey.from_cache else far
        if journey.from_cache:  # an exact hit is found before the semantic lookup
            journey.gateway_s = 0.0 if journey.repeat else semantic_hit_s(journey.prompt)
        else:
            journey.gateway_s = forwarding.seconds(journey.prompt)


class _Replica:
    """A replica's engine as a SimPy process: sim/replica.py's loop, in virtual time. With `idle_unload_s`
    (scale to zero) a replica left idle that long unloads its model, and the next request waits for it to
    load back; the requests that waited meanwhile record that part of their wait.

    `fast`: while its sequences are all decoding, a replica runs the steps until the first of them finishes
    as one wait (Engine.decode_run), and a request routed to it meanwhile cuts the run short where the step under
    way ends, as stepping would have admitted it. Requests routed to other replicas do not disturb it."""

    def __init__(self, env: simpy.Environment, engine: Engine, idle_unload_s: float | None, load_s: float,
                 fast: bool) -> None:
        self.env, self.engine = env, engine
        self.idle_unload_s, self.load_s = idle_unload_s, load_s
        self.fast = fast
        self.busy_s = 0.0
        self.loaded_since: float | None = 0.0  # None while unloaded
        self.loaded_s = 0.0
        self.loads = 0
        self._wake: simpy.Event | None = None
        self._in_run = False  # waiting out a decode run that a new request cuts short
        self.prefix = PrefixCache(engine.kv_capacity // BLOCK)  # as the live replica's: blocks its KV holds
        self._process = env.process(self._run())

    @property
    def load(self) -> int:
        return len(self.engine.waiting) + len(self.engine.running)

    def submit(self, sequence: Sequence, blocks: list[bytes]) -> None:
        """`blocks`: the request's shared prefix, as block names: what this replica holds is not prefilled."""
        if blocks:
            self.prefix.reuse(sequence, blocks)
        self.engine.submit(sequence)
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()
        elif self._in_run:
            self._in_run = False  # one interruption: the run ends where its step under way does
            self._process.interrupt()

    def close(self, at: float) -> None:
        if self.loaded_since is not None:
            self.loaded_s += at - self.loaded_since

    def _run(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        while True:
            if not self.engine.busy:
                self._wake = env.event()
                if self.loaded_since is not None and self.idle_unload_s is not None:
                    idle = env.timeout(self.idle_unload_s)
                    yield self._wake | idle
                    if not self._wake.triggered:  # idle long enough: unloaded, its KV and prefixes gone
                        self.loaded_s += env.now - self.loaded_since
                        self.loaded_since = None
                        self.prefix.clear()
                        yield self._wake
                else:
                    yield self._wake
            if self.loaded_since is None:
                start = env.now
                self.loaded_since = start  # billed from the moment it starts loading
                yield env.timeout(self.load_s)
                for sequence in self.engine.waiting:
                    sequence.cold_s = env.now - max(sequence.arrived_at, start)
                self.loads += 1
            ends = self.engine.decode_run(env.now, RUN_STEPS_MOST) if self.fast else None
            if ends is not None:
                yield from self._decode_run(ends)
                continue
            step = self.engine.step(env.now)
            if step is None:  # nothing admissible: submit() refuses what could never fit, so it cannot last
                yield env.timeout(0.001)
                continue
            self.busy_s += step.duration
            yield env.timeout(step.duration)

    def _decode_run(self, ends: np.ndarray) -> Generator[simpy.Event, Any, None]:
        start, env = self.env.now, self.env
        steps = len(ends)
        self._in_run = True
        try:
            yield env.timeout(float(ends[-1]) - start)
        except simpy.Interrupt:  # a request came now: the step under way ends, then it is admitted
            steps = min(int(np.searchsorted(ends, env.now, side="right")) + 1, steps)
            yield env.timeout(float(ends[steps - 1]) - env.now)
        self._in_run = False
        end = float(ends[steps - 1])
        self.engine.advance(steps)
        self.busy_s += end - start


RUN_STEPS_MOST = 128  # a decode run's length at most: a run cut short early wastes the steps it worked out


def _self_hosted(hosted: SelfHosted, journeys: list[Journey], until: float, fast: bool = True) -> Served:
    """Runs the journeys through the option's replicas: what they spent, until no earlier than `until`, nor
    than the last replica unloading. `fast`: decode runs between
    requests (the same result, tested, in a fraction of the steps)."""
    env = simpy.Environment()
    deployment = hosted.deployment
    replicas = [_Replica(env, Engine(deployment), hosted.idle_unload_s, hosted.cold_start_s, fast)
                for _ in range(hosted.replicas)]
    sequences: list[tuple[Journey, Sequence]] = []
    # Every request of a kind shares its prefix's text, so its blocks have the same names everywhere.
    longest = max((j.prefix for j in journeys), default=0) // BLOCK
    shared_blocks = {kind: [f"{kind}'s shared prefix, block {n}".encode() for n in range(longest)]
                     for kind in {j.kind for j in journeys}}

    def arrivals() -> Generator[simpy.Event, Any, None]:
        for journey in journeys:
            at = journey.arrived + journey.front_end_s  # the engine has it once the stack's front end is done
            if at > env.now:
                yield env.timeout(at - env.now)
            sequence = Sequence(journey.prompt, journey.answer, env.now)
            try:
                blocks = shared_blocks[journey.kind][:journey.prefix // BLOCK]
                min(replicas, key=lambda r: r.load).submit(sequence, blocks)
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
        journey.finished, journey.cold_s = sequence.finished_at, sequence.cold_s
        journey.cached = sequence.cached
    end = max(env.now, until)
    for replica in replicas:
        replica.close(end)
    return Served(end, sum(r.busy_s for r in replicas), sum(r.loaded_s for r in replicas),
                  sum(r.loads for r in replicas))
