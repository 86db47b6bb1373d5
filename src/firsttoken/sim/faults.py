"""Misbehaviour on purpose: a region whose GPUs sometimes stall, that fails some requests, or that is busy
with other people's traffic, so that the gateway's routing can be tested and measured against known faults.

The `faults:` part of the `sim:` settings sets them at start; `POST /sim/faults` changes them while the
region runs (a region that degrades mid-benchmark). Draws come from a seeded generator, so a run is
repeatable.

  stall_share, stall_s   that share of requests waits stall_s longer for its first token (a preempted or
                         badly placed request, a GPU that hiccups): it shows as queue in Server-Timing
  queue_ms               every request waits this much longer in the queue (other tenants' load)
  error_share, error     that share of requests fails: HTTP 500 or 503, or `reset` (the connection is
                         dropped with no answer)
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

ErrorKind = Literal["500", "503", "reset"]


class FaultSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    stall_share: float = Field(0.0, ge=0, le=1, description="share of requests whose first token stalls")
    stall_s: float = Field(2.0, ge=0, le=600, description="how long a stall adds, seconds")
    queue_ms: float = Field(0.0, ge=0, le=600_000, description="added to every request's queue, ms")
    error_share: float = Field(0.0, ge=0, le=1, description="share of requests that fail")
    error: ErrorKind = Field("500", description="how they fail: 500, 503 or reset")
    seed: int = Field(0, description="of the draws, so that a run is repeatable")

    @field_validator("error", mode="before")
    @classmethod
    def _error_as_text(cls, value: object) -> object:
        return str(value) if isinstance(value, int) else value  # YAML reads `error: 500` as a number


class Verdict:
    """What happens to one request: fail (with `error`), or wait `delay_s` more before it is queued."""

    __slots__ = ("delay_s", "error")

    def __init__(self, delay_s: float, error: ErrorKind | None) -> None:
        self.delay_s = delay_s
        self.error = error


HEALTHY = Verdict(0.0, None)


class Faults:
    """The faults in force, and the draws for each request."""

    def __init__(self, settings: FaultSettings) -> None:
        self.settings = settings
        self._random = random.Random(settings.seed)

    def change(self, changes: dict[str, object]) -> FaultSettings:
        """Apply some fields (pydantic.ValidationError for bad ones); a new seed restarts the draws."""
        self.settings = FaultSettings.model_validate({**self.settings.model_dump(), **changes})
        if "seed" in changes:
            self._random = random.Random(self.settings.seed)
        return self.settings

    def draw(self) -> Verdict:
        s = self.settings
        if not (s.error_share or s.stall_share or s.queue_ms):
            return HEALTHY
        if s.error_share and self._random.random() < s.error_share:
            return Verdict(0.0, s.error)
        stalled = bool(s.stall_share) and self._random.random() < s.stall_share
        return Verdict(s.queue_ms / 1000 + (s.stall_s if stalled else 0.0), None)
