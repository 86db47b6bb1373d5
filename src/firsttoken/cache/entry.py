"""A cached answer: as the upstream gave it, a whole completion (`json`) or a stream's events (`sse`), so
that a replay has the upstream's own shape; replay.py turns either into the other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["json", "sse"]


@dataclass(frozen=True, slots=True)
class Entry:
    kind: Kind
    body: bytes  # json: the completion object; sse: the events' lines, each event ended by a blank line
    tenant: str
    model: str  # the route that answered (`upstream/model`), for stats and purges
    created: float  # unix time
    expires: float  # unix time

    @property
    def size(self) -> int:
        return len(self.body)


@dataclass(frozen=True, slots=True)
class PromptRecord:
    """A prompt the semantic index knows, as the stores keep it: every gateway that shares the store (and
    this one after a restart) rebuilds its index from these, without embedding anything again."""

    ref: str  # the exact key its answer is stored under
    scope: str
    text: str
    vector: bytes  # float32, unit length; empty until a lookup in its scope needed it (unembedded.py)
    expires: float  # unix time: its answer's
