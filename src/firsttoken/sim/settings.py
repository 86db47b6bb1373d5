"""What a simulated region runs, as settings: the `sim:` section of firsttoken.yaml and the flags of
`firsttoken sim` (flags override the file). Validation builds the deployments and resolves the places,
so a typo in a model, a GPU or a city is reported at start-up with the key and the closest names.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from firsttoken.geo import physics
from firsttoken.geo.places import GeoError, Place, resolve
from firsttoken.sim.catalogue import Catalogue, CatalogueError
from firsttoken.sim.engine import DEFAULT_MAX_BATCH, DEFAULT_TOKEN_BUDGET
from firsttoken.sim.faults import FaultSettings
from firsttoken.sim.roofline import (
    DEFAULT_LOAD_BANDWIDTH_GB_S,
    ENGINE_START_S,
    Deployment,
    DeploymentError,
    Efficiency,
)

_DEFAULT_EFFICIENCY = Efficiency()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EfficiencySettings(_Strict):
    decode_bandwidth: float = Field(_DEFAULT_EFFICIENCY.decode_bandwidth, gt=0, le=1)
    prefill_compute: float = Field(_DEFAULT_EFFICIENCY.prefill_compute, gt=0, le=1)
    step_overhead_ms: float = Field(_DEFAULT_EFFICIENCY.step_overhead_ms, ge=0)
    tp_comm_ms_per_layer: float = Field(_DEFAULT_EFFICIENCY.tp_comm_ms_per_layer, ge=0)


class CatalogueAdditions(_Strict):
    gpus: dict[str, dict[str, Any]] = Field(default_factory=dict)
    models: dict[str, dict[str, Any]] = Field(default_factory=dict)


class SimSettings(_Strict):
    models: list[str] = Field(default_factory=lambda: ["llama-3.1-8b"], min_length=1)
    gpu: str = "h100"
    tp: int = Field(1, ge=1, le=64)
    replicas: int = Field(1, ge=1, le=256, description="copies of each model, each on its own tp GPUs")
    precision: Literal["bf16", "fp8", "int4"] = "bf16"
    idle_unload: float | None = Field(None, gt=0, description="seconds idle before a replica unloads its model")
    load_gb_s: float = Field(DEFAULT_LOAD_BANDWIDTH_GB_S, gt=0, description="weights' load bandwidth, GB/s")
    engine_start_s: float = Field(ENGINE_START_S, ge=0, description="fixed part of a cold start")
    rpm: int | None = Field(None, ge=1, description="requests per minute per API key")
    tpm: int | None = Field(None, ge=1, description="tokens (prompt + max answer) per minute per API key")
    max_queue: int | None = Field(None, ge=0, description="waiting requests per model before new ones are refused")
    overload_status: Literal[429, 503] = 503
    region: str | None = Field(None, description="where the GPUs are: a region code, city or lat,lon")
    client_location: str | None = Field(None, description="where the clients are; with region, adds distance")
    path_factor: float = Field(physics.DEFAULT_PATH_FACTOR, ge=1)
    token_budget: int = Field(DEFAULT_TOKEN_BUDGET, ge=16)
    max_batch: int = Field(DEFAULT_MAX_BATCH, ge=1)
    efficiency: EfficiencySettings = Field(default_factory=EfficiencySettings)
    catalogue: CatalogueAdditions = Field(default_factory=CatalogueAdditions)
    faults: FaultSettings = Field(default_factory=FaultSettings)
    answers: Literal["natural", "max_tokens"] = Field(
        "natural", description="natural: an answer ends at a length drawn for its kind of request from "
        "production traces (sim/lengths.py); max_tokens: every answer runs to its max_tokens")
    seed: int = Field(0, description="of the answers' lengths: the same request gets the same answer")

    @model_validator(mode="after")
    def _buildable(self) -> SimSettings:
        if len(set(self.models)) != len(self.models):
            raise ValueError("models: each model is listed once (use replicas for more copies)")
        try:
            self.deployments  # noqa: B018  (builds and validates them)
        except (CatalogueError, DeploymentError) as exc:
            raise ValueError(str(exc)) from None
        for key in ("region", "client_location"):
            try:
                self._place(key)
            except GeoError as exc:
                raise ValueError(f"{key}: {exc}") from None
        return self

    @cached_property
    def catalogue_with_additions(self) -> Catalogue:
        return Catalogue.builtin().with_additions(self.catalogue.gpus, self.catalogue.models)

    @cached_property
    def deployments(self) -> dict[str, Deployment]:
        """One deployment (a replica's shape) per model name."""
        catalogue = self.catalogue_with_additions
        efficiency = Efficiency(**self.efficiency.model_dump())
        gpu = catalogue.gpu(self.gpu)
        return {name: Deployment(gpu, catalogue.model(name), self.precision, self.tp, efficiency)
                for name in self.models}

    def load_s(self, deployment: Deployment) -> float:
        return deployment.load_s(self.load_gb_s, self.engine_start_s)

    def _place(self, key: str) -> Place | None:
        value = getattr(self, key)
        return None if value is None else resolve(value)

    @cached_property
    def places(self) -> tuple[Place | None, Place | None]:
        """(region, client_location)."""
        return self._place("region"), self._place("client_location")

    @property
    def one_way_s(self) -> float:
        """Each direction's propagation delay: zero unless both ends are known."""
        region, client = self.places
        if region is None or client is None:
            return 0.0
        distance = physics.great_circle_km(region.lat, region.lon, client.lat, client.lon)
        return physics.fibre_one_way_s(distance, self.path_factor)

    def describe(self) -> str:
        """One line a person reads: what runs where, seen from where."""
        models = ", ".join(self.models)
        gpus = f"{self.tp}× {self.gpu}" if self.tp > 1 else self.gpu
        replicas = f" × {self.replicas} replicas" if self.replicas > 1 else ""
        region, client = self.places
        where = f" in {region}" if region else ""
        seen = f", seen from {client} ({self.one_way_s * 2000:.0f} ms round trip)" if region and client else ""
        return f"{models} at {self.precision} on {gpus}{replicas}{where}{seen}"
