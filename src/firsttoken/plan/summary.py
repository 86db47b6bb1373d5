"""What a run means to the users and the budget: time to first token and to the last as each user feels it,
where that time went, and what the option costs; and which option to pick, in plain words."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from firsttoken.plan.energy import gpu_kwh
from firsttoken.plan.journey import Journey
from firsttoken.plan.network import Route
from firsttoken.plan.scenario import DEFAULT_PUE, ProviderApi, Scenario, SelfHosted
from firsttoken.plan.simulate import Run, Served

HOURS_PER_MONTH = 730.0  # 365 × 24 / 12
# The parts of a time to first token, in the order a request meets them. One round trip's worth of network
# (the request out, the first token back) is split into the floor, the cables' detour and the last mile.
PHASES = ("handshakes", "floor", "distance tax", "last mile", "slow start", "gateway", "front end", "cold start",
          "queue", "prefill")


@dataclass(frozen=True)
class Spread:
    p50: float  # seconds
    p95: float
    p99: float

    @staticmethod
    def of(values: np.ndarray) -> Spread:
        if len(values) == 0:
            return Spread(float("nan"), float("nan"), float("nan"))
        p50, p95, p99 = np.percentile(values, [50, 95, 99])
        return Spread(float(p50), float(p95), float(p99))


@dataclass(frozen=True)
class CitySummary:
    city: str
    requests: int
    floor_ms: float
    rtt_ms: float
    ttft: Spread
    e2e: Spread


@dataclass(frozen=True)
class OptionSummary:
    name: str
    where: str
    requests: int
    refused: int
    cache_hits: int  # answered by the gateway's edge cache
    cold_starts: int  # models loaded back after scaling to zero
    ttft: Spread  # as the user sees it: the first token on screen (the whole answer, when not streamed)
    e2e: Spread  # the last token on screen
    tpot_ms: float  # median time per output token after the first, at the option
    phases: dict[str, float]  # mean seconds of each part of the time to first token (streamed)
    decode_s: float  # mean seconds from the first token to the last
    gpu_utilisation: float | None  # of the replicas' time, the share spent running steps
    usd_per_month: float  # all of it: GPU-hours or tokens, the gateway, and power where it is paid apart
    usd_per_million_tokens: float
    prefix_cached_share: float  # of the prompt tokens that reached the option, those a replica's prefix cache
    # skipped (self-hosted) or the provider billed as cached input (an API)
    hedged_share: float  # of the requests that reached the option, those the gateway hedged
    hedge_won_share: float  # and those the hedge answered first
    sized_share: float  # of the requests that reached an option, those the gateway sent to a smaller model
    price_source: str | None  # where the GPU-hour or token prices come from; None: the scenario gave them
    kwh_per_million_tokens: float | None  # the GPUs' energy, the facility's PUE included; None for an API
    usd_power_per_month: float | None  # electricity bought apart from the GPU-hour (in usd_per_month too)
    power_source: str | None  # where that electricity comes from, as the scenario says
    connections_peak: int | None  # most requests on the gateway's long way at once: the warm connections its
    # pool needs for none of them to pay a handshake across the ocean; None without a gateway
    cities: list[CitySummary]
    ttft_cdf: list[float]  # seconds at the 0th, 1st, …, 100th percentile: the CDF of time to first token

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Columns:
    """The served journeys' times as arrays, read in one pass (a day's run has a million journeys)."""

    sent: np.ndarray
    arrived: np.ndarray
    admitted: np.ndarray
    first_token: np.ndarray
    finished: np.ndarray
    cold: np.ndarray
    handshakes: np.ndarray
    slow_start: np.ndarray  # round trips its request waited for TCP's window to open
    gateway: np.ndarray  # the gateway's own time before it sent the request on
    front_end: np.ndarray  # the serving stack's own time before its engine had it
    floor_ms: np.ndarray  # both legs' together, where there are two
    tax_ms: np.ndarray
    mile_ms: np.ndarray
    prompt: np.ndarray
    answer: np.ndarray
    prefix: np.ndarray  # the shared prefix's tokens in the prompt
    cached: np.ndarray  # of those, the ones whose prefill a replica's prefix cache skipped
    city: np.ndarray
    upstream: np.ndarray  # reached the option: not answered by the gateway's edge cache
    hedged: np.ndarray  # sent to the hedge's option as well
    hedge_won: np.ndarray  # and answered from there
    sized: np.ndarray  # sent by the gateway to a smaller model, another option

    @staticmethod
    def of(journeys: list[Journey]) -> _Columns:
        rows = np.array([(j.sent, j.arrived, j.admitted, j.first_token, j.finished, j.cold_s, j.handshakes_s,
                          j.slow_start_s, j.gateway_s, j.front_end_s, *_legs(j.near, j.far), j.prompt, j.answer,
                          j.prefix, j.cached, j.city, not j.from_cache, j.hedged, j.hedge_won, j.sized)
                         for j in journeys], dtype=np.float64).reshape(-1, 22)
        columns = list(rows.T)
        columns[17] = columns[17].astype(np.int64)
        columns[18:] = [column.astype(bool) for column in columns[18:]]
        return _Columns(*columns)

    def felt(self, stream: bool) -> tuple[np.ndarray, np.ndarray]:
        """Time to first token and to the last, from the user's send to the token on their screen."""
        back = (self.floor_ms + self.tax_ms + self.mile_ms) / 2000
        e2e = self.finished + back - self.sent
        return (self.first_token + back - self.sent if stream else e2e), e2e


# A provider caches a prompt's prefix from this length on (OpenAI's automatic caching and Anthropic's
# cache_control both start at 1 024 tokens for their main models); shorter prefixes are billed in full.
PROVIDER_CACHE_MIN_TOKENS = 1024


def _provider_held(api: ProviderApi, prefix: np.ndarray) -> np.ndarray:
    """Of each prompt, the tokens the provider bills as cached input: a shared prefix long enough to be
    cached, where the provider prices cached input (steady traffic keeps it warm)."""
    if api.usd_per_million_cached_input is None:
        return np.zeros_like(prefix)
    return np.where(prefix >= PROVIDER_CACHE_MIN_TOKENS, prefix, 0)


def _api_usd(api: ProviderApi, prompt: np.ndarray, prefix: np.ndarray, answer: np.ndarray) -> float:
    """What the requests cost at the provider's prices."""
    held = _provider_held(api, prefix)
    return float(np.sum((prompt - held) * api.usd_per_million_input
                        + held * (api.usd_per_million_cached_input or 0.0)
                        + answer * api.usd_per_million_output)) / 1e6


def _legs(near: Route, far: Route | None) -> tuple[float, float, float]:
    if far is None:
        return near.floor_ms, near.distance_tax_ms, near.last_mile_ms
    return (near.floor_ms + far.floor_ms, near.distance_tax_ms + far.distance_tax_ms,
            near.last_mile_ms + far.last_mile_ms)


def summarise(scenario: Scenario, run: Run) -> OptionSummary:
    served = [j for j in run.journeys if not j.refused]
    columns = _Columns.of(served)
    ttft, e2e = columns.felt(scenario.workload.stream)
    per_month = HOURS_PER_MONTH * 3600 / scenario.duration_s
    tokens = float(np.sum(columns.prompt + columns.answer)) * per_month
    upstream = columns.upstream
    hosted, api, gateway = run.option.self_hosted, run.option.api, run.option.gateway
    kwh = power_usd = None
    if hosted is not None:  # billed while loaded: always, unless it scales to zero
        usd, kwh, power_usd = _hosted_per_month(hosted, run.served, per_month)
        utilisation: float | None = run.served.busy_s / (run.served.until * run.replicas)
        price_source = hosted.price_source
    else:
        assert api is not None
        own = upstream & ~columns.sized
        usd = _api_usd(api, columns.prompt[own], columns.prefix[own], columns.answer[own]) * per_month
        utilisation = None
        price_source = api.price_source
    smaller, sized = run.sized_to, run.sized
    if smaller is not None and sized is not None:  # the smaller model's deployment, or its API's tokens
        if smaller.self_hosted is not None:
            more_usd, more_kwh, more_power = _hosted_per_month(smaller.self_hosted, sized, per_month)
            usd += more_usd
            kwh = kwh + more_kwh if kwh is not None and more_kwh is not None else kwh
            power_usd = (power_usd or 0.0) + more_power if more_power is not None else power_usd
        else:
            assert smaller.api is not None
            usd += _api_usd(smaller.api, columns.prompt[columns.sized], columns.prefix[columns.sized],
                            columns.answer[columns.sized]) * per_month
    usd += gateway.usd_per_month if gateway is not None else 0.0
    hedge = gateway.hedge if gateway is not None else None
    target = scenario.hedge_target(hedge) if hedge is not None else None
    if target is not None and target.api is not None:  # every hedge bills its prompt; a winner its answer too
        hedged = columns.hedged
        usd += _api_usd(target.api, columns.prompt[hedged], columns.prefix[hedged],
                        np.where(columns.hedge_won, columns.answer, 0)[hedged]) * per_month
    phases = {
        "handshakes": _mean(columns.handshakes),
        "floor": _mean(columns.floor_ms / 1000),
        "distance tax": _mean(columns.tax_ms / 1000),
        "last mile": _mean(columns.mile_ms / 1000),
        "slow start": _mean(columns.slow_start),
        "gateway": _mean(columns.gateway),
        "front end": _mean(columns.front_end),
        "cold start": _mean(columns.cold),
        "queue": _mean(columns.admitted - columns.arrived - columns.front_end - columns.cold),
        "prefill": _mean(columns.first_token - columns.admitted),
    }
    decoded = upstream & (columns.answer > 1)
    tpot = (columns.finished - columns.first_token)[decoded] / (columns.answer[decoded] - 1)
    cities = []
    rtt = columns.floor_ms + columns.tax_ms + columns.mile_ms
    for index, city in enumerate(scenario.users.cities):
        mine = columns.city == index
        reached = np.flatnonzero(mine & upstream)  # the way to the option, from one that took it
        cities.append(CitySummary(city.place, int(mine.sum()),
                                  float(columns.floor_ms[reached[0]]) if len(reached) else float("nan"),
                                  float(rtt[reached[0]]) if len(reached) else float("nan"),
                                  Spread.of(ttft[mine]), Spread.of(e2e[mine])))
    return OptionSummary(
        run.option.name, run.option.where.code or run.option.where.name, len(served),
        len(run.journeys) - len(served), len(served) - int(upstream.sum()), run.served.cold_starts, Spread.of(ttft),
        Spread.of(e2e), float(np.median(tpot)) * 1000 if len(tpot) else float("nan"), phases,
        _mean(columns.finished - columns.first_token), utilisation, usd,
        usd / tokens * 1e6 if tokens else float("nan"), _prefix_share(columns, api),
        _share(columns.hedged, upstream), _share(columns.hedge_won, upstream), _share(columns.sized, upstream),
        price_source,
        kwh / tokens * 1e6 if kwh is not None and tokens else None, power_usd,
        hosted.power.source if hosted is not None and hosted.power is not None else None,
        connections_peak(served) if gateway is not None else None, cities,
        [float(v) for v in np.percentile(ttft, np.arange(101))] if len(ttft) else [])


def _hosted_per_month(hosted: SelfHosted, served: Served,
                      per_month: float) -> tuple[float, float | None, float | None]:
    """A deployment's month: what it costs (its GPU-hours while loaded, and electricity where it is bought
    apart), its GPUs' energy in kWh (None where the catalogue has no board power) and that electricity."""
    usd = hosted.usd_per_gpu_hour * hosted.tp * served.loaded_s / served.until * HOURS_PER_MONTH
    power_w = hosted.deployment.gpu.power_w
    if power_w is None:
        return usd, None, None
    pue = hosted.power.pue if hosted.power is not None else DEFAULT_PUE
    kwh = gpu_kwh(power_w, hosted.tp, served.busy_s, served.loaded_s, pue) * per_month
    if hosted.power is None:
        return usd, kwh, None
    power_usd = kwh * hosted.power.usd_per_kwh
    return usd + power_usd, kwh, power_usd


def _prefix_share(columns: _Columns, api: ProviderApi | None) -> float:
    prompts = columns.prompt[columns.upstream]
    if not len(prompts) or not prompts.sum():
        return 0.0
    skipped = columns.cached if api is None else _provider_held(api, columns.prefix)
    return float(skipped[columns.upstream].sum() / prompts.sum())


def connections_peak(journeys: list[Journey]) -> int:
    """The most requests in flight at once between a gateway and its option (not those it sized down or
    whose hedge answered: other upstreams, other pools): each holds a connection from the moment the
    gateway sends it until its last token is back there."""
    spans = np.array([(j.arrived - j.far.rtt_ms / 2000, j.finished + j.far.rtt_ms / 2000)
                      for j in journeys if j.far is not None and not j.sized and not j.hedge_won]).reshape(-1, 2)
    times = np.concatenate([spans[:, 0], spans[:, 1]])
    steps = np.concatenate([np.ones(len(spans)), -np.ones(len(spans))])
    order = np.lexsort((steps, times))  # at the same moment a connection is given back before it is taken again
    return int(np.cumsum(steps[order]).max(initial=0))


def _share(which: np.ndarray, of: np.ndarray) -> float:
    return float(which[of].sum() / of.sum()) if of.any() else 0.0


def _mean(values: np.ndarray) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


NEARLY_AS_FAST = 1.1  # an option whose p95 first token is within a tenth of the fastest's


def recommend(summaries: list[OptionSummary]) -> str:
    """The option with the lowest p95 time to first token, against the slowest and on cost, in a sentence;
    and the cheapest of those nearly as fast, when it saves money."""
    ranked = sorted(summaries, key=lambda s: s.ttft.p95)
    best = ranked[0]
    light_ms = best.phases["floor"] * 1000
    words = [f"{best.name} gives these users the fastest first token: p95 {best.ttft.p95:.2f} s"]
    if len(ranked) > 1:
        worst = ranked[-1]
        words.append(f" against {worst.ttft.p95:.2f} s for {worst.name}")
        cheapest = min(summaries, key=lambda s: s.usd_per_month)
        if cheapest is best:
            words.append(", and it costs the least")
        else:
            more = best.usd_per_month / cheapest.usd_per_month - 1 if cheapest.usd_per_month else float("inf")
            words.append(f", at {more:.0%} more a month than {cheapest.name}")
    words.append(f". Of its mean, {light_ms:.0f} ms is the speed of light in fibre: no software removes it.")
    close = [s for s in ranked[1:] if s.ttft.p95 <= best.ttft.p95 * NEARLY_AS_FAST]
    thrifty = min(close, key=lambda s: s.usd_per_month, default=None)
    if thrifty is not None and thrifty.usd_per_month < best.usd_per_month:
        saved = 1 - thrifty.usd_per_month / best.usd_per_month
        words.append(f" Nearly as fast, {thrifty.name} (p95 {thrifty.ttft.p95:.2f} s) costs {saved:.0%} less.")
    return "".join(words)
