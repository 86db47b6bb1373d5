"""What a run means to the users and the budget: time to first token and to the last as each user feels it,
where that time went, and what the option costs; and which option to pick, in plain words."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from firsttoken.plan.energy import gpu_kwh
from firsttoken.plan.scenario import DEFAULT_PUE, Scenario
from firsttoken.plan.simulate import Journey, Run

HOURS_PER_MONTH = 730.0  # 365 × 24 / 12
# The parts of a time to first token, in the order a request meets them. One round trip's worth of network
# (the request out, the first token back) is split into the floor, the cables' detour and the last mile.
PHASES = ("handshakes", "floor", "distance tax", "last mile", "cold start", "queue", "prefill")


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
    price_source: str | None  # where the GPU-hour or token prices come from; None: the scenario gave them
    kwh_per_million_tokens: float | None  # the GPUs' energy, the facility's PUE included; None for an API
    usd_power_per_month: float | None  # electricity bought apart from the GPU-hour (in usd_per_month too)
    power_source: str | None  # where that electricity comes from, as the scenario says
    cities: list[CitySummary]
    ttft_cdf: list[float]  # seconds at the 0th, 1st, …, 100th percentile: the CDF of time to first token

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _felt(journeys: list[Journey], stream: bool) -> tuple[np.ndarray, np.ndarray]:
    sent = np.array([j.sent for j in journeys])
    back = np.array([j.one_way_s for j in journeys])
    e2e = np.array([j.finished for j in journeys]) + back - sent
    ttft = np.array([j.first_token for j in journeys]) + back - sent if stream else e2e
    return ttft, e2e


def summarise(scenario: Scenario, run: Run) -> OptionSummary:
    served = [j for j in run.journeys if not j.refused]
    ttft, e2e = _felt(served, scenario.workload.stream)
    per_month = HOURS_PER_MONTH * 3600 / scenario.duration_s
    tokens = sum(j.prompt + j.answer for j in served) * per_month
    upstream = [j for j in served if not j.from_cache]
    hosted, api, gateway = run.option.self_hosted, run.option.api, run.option.gateway
    kwh = power_usd = None
    if hosted is not None:  # billed while loaded: always, unless it scales to zero
        usd = hosted.usd_per_gpu_hour * hosted.tp * run.loaded_s / run.ended * HOURS_PER_MONTH
        utilisation: float | None = run.busy_s / (run.ended * run.replicas)
        power_w = hosted.deployment.gpu.power_w
        if power_w is not None:
            pue = hosted.power.pue if hosted.power is not None else DEFAULT_PUE
            kwh = gpu_kwh(power_w, hosted.tp, run.busy_s, run.loaded_s, pue) * per_month
        if hosted.power is not None and kwh is not None:
            power_usd = kwh * hosted.power.usd_per_kwh
            usd += power_usd
        price_source = hosted.price_source
    else:
        assert api is not None
        usd = sum(j.prompt * api.usd_per_million_input + j.answer * api.usd_per_million_output
                  for j in upstream) / 1e6 * per_month
        utilisation = None
        price_source = api.price_source
    usd += gateway.usd_per_month if gateway is not None else 0.0
    phases = {
        "handshakes": _mean([j.handshakes_s for j in served]),
        "floor": _mean([sum(leg.floor_ms for leg in j.legs) / 1000 for j in served]),
        "distance tax": _mean([sum(leg.distance_tax_ms for leg in j.legs) / 1000 for j in served]),
        "last mile": _mean([sum(leg.last_mile_ms for leg in j.legs) / 1000 for j in served]),
        "cold start": _mean([j.cold_s for j in served]),
        "queue": _mean([j.admitted - j.arrived - j.cold_s for j in served]),
        "prefill": _mean([j.first_token - j.admitted for j in served]),
    }
    tpot = [(j.finished - j.first_token) / (j.answer - 1) for j in upstream if j.answer > 1]
    cities = []
    for index, city in enumerate(scenario.users.cities):
        mine = [i for i, j in enumerate(served) if j.city == index]
        legs = next((served[i].legs for i in mine if not served[i].from_cache), ())
        cities.append(CitySummary(city.place, len(mine), sum(leg.floor_ms for leg in legs) if legs else float("nan"),
                                  sum(leg.rtt_ms for leg in legs) if legs else float("nan"), Spread.of(ttft[mine]),
                                  Spread.of(e2e[mine])))
    return OptionSummary(
        run.option.name, run.option.where.code or run.option.where.name, len(served),
        len(run.journeys) - len(served), len(served) - len(upstream), run.cold_starts, Spread.of(ttft),
        Spread.of(e2e), float(np.median(tpot)) * 1000 if tpot else float("nan"), phases,
        _mean([j.finished - j.first_token for j in served]), utilisation, usd,
        usd / tokens * 1e6 if tokens else float("nan"), price_source,
        kwh / tokens * 1e6 if kwh is not None and tokens else None, power_usd,
        hosted.power.source if hosted is not None and hosted.power is not None else None, cities,
        [float(v) for v in np.percentile(ttft, np.arange(101))] if len(ttft) else [])


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def recommend(summaries: list[OptionSummary]) -> str:
    """The option with the lowest p95 time to first token, against the slowest and on cost, in a sentence."""
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
    return "".join(words)
