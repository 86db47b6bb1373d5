"""A planning scenario, as its YAML file says it: who the users are and how often they ask, what they ask,
and the options to compare. Validation resolves every place and builds every deployment, so a typo in a
city, a GPU or a model is reported with its key before anything runs."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from firsttoken.geo.places import GeoError, Place, resolve
from firsttoken.plan import serving
from firsttoken.plan.arrivals import SHAPES, Arrivals, Bursts
from firsttoken.plan.network import INITIAL_WINDOW_SEGMENTS, Route, route
from firsttoken.plan.workload import PRESETS, LengthsError, read_lengths
from firsttoken.prices import shipped as prices
from firsttoken.sim.catalogue import Catalogue, CatalogueError
from firsttoken.sim.roofline import DEFAULT_LOAD_BANDWIDTH_GB_S, ENGINE_START_S, Deployment, DeploymentError

DEFAULT_START = datetime(2026, 3, 2, tzinfo=UTC)  # a Monday's midnight, UTC: any fixed time keeps runs repeatable


# The Uptime Institute's global survey average (2023: 1.58) is an old enterprise room's; hyperscale halls
# report 1.1-1.2. Between the two, for a colocation hall: chosen, and a scenario says its own.
DEFAULT_PUE = 1.4


class ScenarioError(ValueError):
    """A scenario that cannot be run; the message names the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _place(text: str) -> Place:
    try:
        return resolve(text)
    except GeoError as exc:
        raise ValueError(str(exc)) from None


class City(_Strict):
    place: str = Field(description="a city (lagos), a region code or lat,lon")
    share: float = Field(gt=0, description="of the requests; shares are normalised to add up to 1")
    last_mile_ms: float | None = Field(None, ge=0, description="the access network's round trip there")

    @property
    def where(self) -> Place:
        return _place(self.place)

    @model_validator(mode="after")
    def _resolves(self) -> City:
        self.where  # noqa: B018  (raises for an unknown place)
        return self


class Burst(_Strict):
    every_s: float = Field(gt=0, description="on average, one burst starts this often (they come at random)")
    length_s: float = Field(gt=0, description="how long each lasts")
    factor: float = Field(gt=1, description="the rate during a burst, as a multiple of the usual")


class Users(_Strict):
    cities: list[City] = Field(min_length=1)
    rate_per_s: float = Field(gt=0, description="requests a second, all cities together (Poisson arrivals): the "
                              "day's mean where over_the_day shapes it")
    over_the_day: Literal["flat", "working-day", "evening"] | list[float] = Field(
        "flat", description="how the rate moves over each city's own day: a shape's name, or 24 hourly values")
    bursts: Burst | None = None
    last_mile_ms: float = Field(20.0, ge=0, description="each city's access-network round trip, unless it sets one")
    reuse: float = Field(0.0, ge=0, le=1, description="the share of requests sent on a connection already open")

    @model_validator(mode="after")
    def _a_day(self) -> Users:
        if isinstance(self.over_the_day, list) and (
                len(self.over_the_day) != 24 or min(self.over_the_day) < 0 or max(self.over_the_day) <= 0):
            raise ValueError("over_the_day: 24 hourly values (midnight first), none negative, some above 0")
        return self

    def arrivals(self, start: datetime) -> Arrivals:
        shares = np.array([c.share for c in self.cities])
        shape = SHAPES[self.over_the_day] if isinstance(self.over_the_day, str) else tuple(self.over_the_day)
        bursts = Bursts(self.bursts.every_s, self.bursts.length_s, self.bursts.factor) if self.bursts else None
        return Arrivals(self.rate_per_s, [c.where for c in self.cities], shares / shares.sum(), shape, start,
                        bursts)


PresetName = Literal["chat", "rag", "agent", "classification"]


class Workload(_Strict):
    preset: PresetName = "chat"
    mix: dict[PresetName, float] | None = Field(None, description="kinds of request and their shares of the "
                                                 "traffic (chat: 0.7, classification: 0.3), instead of one "
                                                 "preset: each request's lengths and shared prefix are its "
                                                 "kind's")
    lengths: Path | None = Field(None, description="a CSV of prompt (and answer) lengths to draw requests from, "
                                 "instead of the preset's; relative to the scenario's file")
    stream: bool = True
    repeats: float = Field(0.0, ge=0, lt=1, description="the share of requests asked before in the same words: "
                           "a gateway's edge cache answers them")
    paraphrases: float = Field(0.0, ge=0, lt=1, description="the share of requests asked before in other "
                               "words: a gateway's semantic cache answers most of them")
    bytes_per_token: float = Field(4.0, gt=0, description="what a prompt token weighs on the wire: about 4 "
                                   "characters of English text (JSON's escapes aside); sets how many round trips "
                                   "a long prompt needs in TCP's slow start")
    shared_prefix_tokens: int | None = Field(None, ge=0, description="leading prompt tokens every request "
                                             "repeats (a system prompt, tools): a replica's prefix cache skips "
                                             "their prefill, a provider bills them at its cached-input price; "
                                             "unset: the preset's (agent 4 000, classification 160, else 0)")

    @model_validator(mode="after")
    def _shares(self) -> Workload:
        if self.repeats + self.paraphrases >= 1:
            raise ValueError("repeats + paraphrases: the shares of requests asked before add up to less than 1")
        if self.mix is not None:
            if not self.mix or any(share <= 0 for share in self.mix.values()):
                raise ValueError("mix: each kind of request with a share above 0")
            if self.lengths is not None:
                raise ValueError("mix: and lengths: together: a file of lengths stands for one kind of request")
        return self

    @property
    def kinds(self) -> list[tuple[str, float]]:
        """Each kind of request and its share of the traffic, the shares adding up to 1."""
        if self.mix is None:
            return [(self.preset, 1.0)]
        total = sum(self.mix.values())
        return [(kind, share / total) for kind, share in self.mix.items()]

    def shared_prefix_of(self, kind: str) -> int:
        return PRESETS[kind].shared_prefix if self.shared_prefix_tokens is None else self.shared_prefix_tokens

    @property
    def described(self) -> str:
        """In words, for the terminal and the report: "chat", or "chat 70 %, classification 30 %"."""
        kinds = self.kinds
        return kinds[0][0] if len(kinds) == 1 else ", ".join(f"{kind} {share:.0%}" for kind, share in kinds)

    @field_validator("lengths")
    @classmethod
    def _readable(cls, lengths: Path | None, info: ValidationInfo) -> Path | None:
        if lengths is None:
            return None
        base = (info.context or {}).get("base")
        where = (base / lengths if base is not None else lengths).resolve()
        try:
            read_lengths(str(where))
        except LengthsError as exc:
            raise ValueError(str(exc)) from None
        return where


class Power(_Strict):
    """Electricity where the GPUs are, when it is bought apart from the GPU-hour."""

    usd_per_kwh: float = Field(ge=0, description="what a kWh costs there")
    source: str | None = Field(None, description="where it comes from, in words: grid, diesel generators, solar")
    pue: float = Field(DEFAULT_PUE, ge=1, description="the facility's power usage effectiveness: cooling and "
                       "losses, per watt the IT load draws")


class FrontEndTimes(_Strict):
    """A serving stack's own time on a request, as measured on it (plan/serving.py)."""

    per_request_ms: float = Field(ge=0)
    per_1k_prompt_ms: float = Field(0.0, ge=0, description="what each thousand prompt tokens add")
    source: str | None = Field(None, description="where the figures come from")

    @property
    def front_end(self) -> serving.FrontEnd:
        return serving.FrontEnd(self.per_request_ms, self.per_1k_prompt_ms, self.source)


class SelfHosted(_Strict):
    place: str = Field(description="where the GPUs are: a region code, a city or lat,lon")
    gpu: str = "h100"
    model: str = "llama-3.1-8b"
    precision: Literal["bf16", "fp8", "int4"] = "bf16"
    tp: int = Field(1, ge=1, le=64)
    replicas: int = Field(1, ge=1, le=256)
    usd_per_gpu_hour: float = Field(ge=0, description="what one GPU costs an hour there (while loaded); unset: "
                                    "the shipped table's on-demand price for the GPU at that place")
    price_source: str | None = Field(None, description="where the price comes from (the table's row, when it "
                                     "gave the price)")
    power: Power | None = Field(None, description="the electricity at that place, where it is paid apart from "
                                "the GPU-hour (a colocation)")
    idle_unload_s: float | None = Field(None, gt=0, description="scale to zero: idle this long, the model is "
                                        "unloaded and the next request waits for it to load back")
    load_gb_s: float = Field(DEFAULT_LOAD_BANDWIDTH_GB_S, gt=0, description="weights' load bandwidth, GB/s")
    stack: str | FrontEndTimes = Field(serving.DEFAULT_STACK, description="the serving stack's own time on a "
                                       "request outside the engine: a name from the shipped table, or its "
                                       "measured per_request_ms and per_1k_prompt_ms")

    @model_validator(mode="before")
    @classmethod
    def _priced(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("usd_per_gpu_hour") is not None or "place" not in data:
            return data
        where = _place(data["place"])
        try:
            row = prices.gpu_hour(data.get("gpu", "h100"), where.code or where.name)
        except prices.NoPrice as exc:
            raise ValueError(str(exc)) from None
        return {**data, "usd_per_gpu_hour": row.usd, "price_source": data.get("price_source") or row.cited}

    @field_validator("stack")
    @classmethod
    def _known_stack(cls, stack: str | FrontEndTimes) -> str | FrontEndTimes:
        if isinstance(stack, str):
            try:
                serving.stack(stack)
            except KeyError as exc:
                raise ValueError(exc.args[0]) from None
        return stack

    @property
    def front_end(self) -> serving.FrontEnd:
        return serving.stack(self.stack) if isinstance(self.stack, str) else self.stack.front_end

    @property
    def cold_start_s(self) -> float:
        return self.deployment.load_s(self.load_gb_s, ENGINE_START_S)

    @property
    def deployment(self) -> Deployment:
        catalogue = Catalogue.builtin()
        return Deployment(catalogue.gpu(self.gpu), catalogue.model(self.model), self.precision, self.tp)

    @model_validator(mode="after")
    def _buildable(self) -> SelfHosted:
        _place(self.place)
        try:
            self.deployment  # noqa: B018
        except (CatalogueError, DeploymentError) as exc:
            raise ValueError(str(exc)) from None
        return self


class ProviderApi(_Strict):
    """A provider's API in a region, as its published profile says it serves: the time to a first token
    from the request's arrival there, and the time between tokens."""

    place: str = Field(description="the API region: a region code, a city or lat,lon")
    model: str
    ttft_ms: float = Field(gt=0, description="median time to first token at the provider, network excluded")
    itl_ms: float = Field(gt=0, description="time between output tokens")
    usd_per_million_input: float = Field(ge=0, description="unset (with the output's): the shipped table's")
    usd_per_million_output: float = Field(ge=0)
    usd_per_million_cached_input: float | None = Field(None, ge=0, description="a prompt prefix the provider "
                                                       "holds from an earlier request; unset: the table's, or "
                                                       "the input price")
    price_source: str | None = Field(None, description="where the prices come from (the table's row, when it "
                                     "gave them)")

    @model_validator(mode="before")
    @classmethod
    def _priced(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "model" not in data or (
                data.get("usd_per_million_input") is not None and data.get("usd_per_million_output") is not None):
            return data
        try:
            row = prices.api_price(data["model"])
        except prices.NoPrice as exc:
            raise ValueError(str(exc)) from None
        given = {key: value for key, value in data.items() if value is not None}
        table = {"usd_per_million_input": row.usd_per_million_input,
                 "usd_per_million_output": row.usd_per_million_output,
                 "usd_per_million_cached_input": row.usd_per_million_cached_input}
        return {**table, **given, "price_source": data.get("price_source") or row.cited}

    @model_validator(mode="after")
    def _resolves(self) -> ProviderApi:
        _place(self.place)
        return self


class Hedge(_Strict):
    """A second request to another option (a provider's API) when the first token is slow: whichever first
    token comes first is the answer, and the other request is cancelled."""

    to: str = Field(description="the name of an api: option of the scenario")
    after_ms: float = Field(gt=0, description="how long the gateway waits for a first token before it hedges")


class Sizing(_Strict):
    """Task sizing at the gateway: requests of some kinds go to a smaller model, another option of the
    scenario (a deployment of its own, or a provider's API), instead of this option."""

    to: str = Field(description="the name of another option of the scenario: it answers them")
    kinds: list[PresetName] = Field(min_length=1, description="the kinds of request (the workload's) sent there")


class Gateway(_Strict):
    """A firsttoken gateway between the users and the option: near them, its connections across the ocean
    kept warm (no handshakes on the long way), its edge cache answering repeated questions."""

    place: str = Field(description="where it runs: a city, a region code or lat,lon")
    cache: bool = Field(True, description="its edge cache answers repeats and paraphrases; off: every request "
                        "goes on")
    initial_window: int = Field(INITIAL_WINDOW_SEGMENTS, ge=1, le=1000, description="TCP's initial congestion "
                                "window on its host's route to the option, in segments (Linux's 10 unless the "
                                "route says `initcwnd N`): a long prompt across the ocean in fewer round trips")
    usd_per_month: float = Field(0.0, ge=0, description="what running it costs")
    hedge: Hedge | None = None
    sizing: Sizing | None = None

    @model_validator(mode="after")
    def _resolves(self) -> Gateway:
        _place(self.place)
        return self

    @property
    def where(self) -> Place:
        return _place(self.place)


class Option(_Strict):
    name: str = Field(min_length=1)
    self_hosted: SelfHosted | None = None
    api: ProviderApi | None = None
    gateway: Gateway | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Option:
        if (self.self_hosted is None) == (self.api is None):
            raise ValueError("an option is either self_hosted: or api:, one of the two")
        return self

    @property
    def where(self) -> Place:
        served = self.self_hosted or self.api
        assert served is not None
        return _place(served.place)


class Search(_Strict):
    """A grid of self-hosted options (`firsttoken plan --search`): every combination of the values under
    `vary` (keys: any field of `self_hosted`, and `gateway`: a place, or null for none), on top of `base`."""

    base: dict[str, Any] = Field(description="self_hosted: fields every option of the grid shares")
    vary: dict[str, list[Any]] = Field(min_length=1)
    usd_per_gpu_hour: dict[str, float] = Field(default_factory=dict,
                                               description="a GPU-hour's price by place, where it differs")

    @model_validator(mode="after")
    def _known(self) -> Search:
        allowed = set(SelfHosted.model_fields) | {"gateway"}
        unknown = sorted(set(self.vary) - allowed)
        if unknown:
            raise ValueError(f"vary: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
        if any(not values for values in self.vary.values()):
            raise ValueError("vary: each field needs at least one value")
        return self


class MeasuredRtt(_Strict):
    """A round trip the team measured between two places (data centre to data centre, or a city's backbone
    to one: without the access network): it replaces the model's for that pair, either way."""

    between: tuple[str, str]
    rtt_ms: float = Field(gt=0)

    @model_validator(mode="after")
    def _resolve(self) -> MeasuredRtt:
        for place in self.between:
            _place(place)
        return self


class Scenario(_Strict):
    name: str
    seed: int = 0
    duration_s: float = Field(600.0, gt=0, description="virtual seconds of traffic to simulate")
    start: datetime = Field(DEFAULT_START, description="when the traffic starts (UTC unless it says otherwise): "
                            "where each city is in its day, for over_the_day")
    path_factor: float | None = Field(None, ge=1, description="the great circle this much longer, for every "
                                      "way; unset: along the cables (geo/paths.py)")
    measured_rtts: list[MeasuredRtt] = Field(default_factory=list, description="round trips measured between "
                                             "places, used instead of the network model's")
    users: Users
    workload: Workload = Field(default_factory=Workload)
    options: list[Option] = Field(default_factory=list)
    search: Search | None = None

    @field_validator("start")
    @classmethod
    def _utc(cls, start: datetime) -> datetime:
        return start.replace(tzinfo=UTC) if start.tzinfo is None else start.astimezone(UTC)

    @model_validator(mode="after")
    def _distinct(self) -> Scenario:
        if not self.options and self.search is None:
            raise ValueError("options: at least one option (or a search: grid)")
        names = [o.name for o in self.options]
        if len(set(names)) != len(names):
            raise ValueError("options: each option needs a name of its own")
        for option in self.options:
            hedge = option.gateway.hedge if option.gateway is not None else None
            if hedge is not None and self.hedge_target(hedge) is None:
                apis = ", ".join(o.name for o in self.options if o.api is not None) or "none"
                raise ValueError(f"{option.name}: gateway.hedge.to {hedge.to!r} names no api: option of the "
                                 f"scenario (its api: options: {apis})")
            sizing = option.gateway.sizing if option.gateway is not None else None
            if sizing is not None:
                self._check_sizing(option, sizing)
        return self

    def _check_sizing(self, option: Option, sizing: Sizing) -> None:
        others = [o.name for o in self.options if o.name != option.name]
        if sizing.to == option.name or sizing.to not in others:
            raise ValueError(f"{option.name}: gateway.sizing.to {sizing.to!r} names no other option of the "
                             f"scenario (they are: {', '.join(others) or 'none'})")
        kinds = [kind for kind, _ in self.workload.kinds]
        strangers = [kind for kind in sizing.kinds if kind not in kinds]
        if strangers:
            raise ValueError(f"{option.name}: gateway.sizing.kinds {', '.join(strangers)}: not in the workload "
                             f"(its kinds: {', '.join(kinds)})")

    def way(self, start: Place, end: Place, last_mile_ms: float) -> Route:
        """The way between two places, as this scenario has it: measured, along the cables, or the great
        circle × its path factor."""
        return route(start, end, self.path_factor, last_mile_ms, self._measured().get(frozenset((start, end))))

    def _measured(self) -> dict[frozenset[Place], float]:
        return {frozenset(_place(p) for p in m.between): m.rtt_ms for m in self.measured_rtts}

    def sizing_target(self, sizing: Sizing) -> Option:
        """The option a gateway sends the requests it sizes down to (the scenario checked that it exists)."""
        return next(o for o in self.options if o.name == sizing.to)

    def hedge_target(self, hedge: Hedge) -> Option | None:
        """The API option a gateway hedges to."""
        return next((o for o in self.options if o.name == hedge.to and o.api is not None), None)


def load(path: str | Path) -> Scenario:
    """The scenario in a YAML file; ScenarioError says what is wrong, with its key."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ScenarioError(f"{path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ScenarioError(f"{path}: a scenario is a mapping with users:, workload: and options:")
    try:
        return Scenario.model_validate(raw, context={"base": Path(path).parent})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'scenario'}: {e['msg']}" for e in exc.errors())
        raise ScenarioError(f"{path}: {problems}") from None
