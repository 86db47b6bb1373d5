"""From the model a client names to the targets that may answer it, in preference order.

An alias from `models:` maps to its targets; `upstream/model` goes straight to that upstream; a
bare model name goes to the upstream that lists it (from its /models answer or the config), or to
the only upstream when there is just one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from firsttoken.config import Settings
from firsttoken.errors import not_found


@dataclass(frozen=True, slots=True)
class Target:
    upstream: str
    model: str

    @property
    def label(self) -> str:
        return f"{self.upstream}/{self.model}"


class TargetResolver:
    def __init__(self, settings: Settings, listed_models: Callable[[str], list[str]]) -> None:
        self.upstreams = list(settings.upstreams)
        self.aliases: dict[str, list[Target]] = {
            alias: [_parse(t) for t in targets] for alias, targets in settings.models.items()
        }
        self._configured = {name: list(u.models) for name, u in settings.upstreams.items()}
        self._listed = listed_models
        self._cache: dict[str, list[Target]] = {}

    def models_of(self, upstream: str) -> list[str]:
        return self._configured[upstream] + [m for m in self._listed(upstream) if m not in self._configured[upstream]]

    def resolve(self, model: str) -> list[Target]:
        cached = self._cache.get(model)
        if cached is not None:
            return cached
        targets = self._resolve(model)
        if len(self._cache) < 10_000:  # a bound: model names come from clients
            self._cache[model] = targets
        return targets

    def _resolve(self, model: str) -> list[Target]:
        if model in self.aliases:
            return self.aliases[model]
        upstream, sep, name = model.partition("/")
        if sep and name and upstream in self._configured:
            return [Target(upstream, name)]
        listing = [Target(u, model) for u in self.upstreams if model in self.models_of(u)]
        if listing:
            return listing
        if len(self.upstreams) == 1:
            return [Target(self.upstreams[0], model)]
        known = ", ".join(sorted(self.aliases)) or "none configured"
        raise not_found(
            f"The model {model!r} does not exist here. Known aliases: {known}; or name a model as "
            f"'upstream/model' with one of the upstreams: {', '.join(self.upstreams) or 'none'}.",
            param="model", code="model_not_found")


def _parse(target: str) -> Target:
    upstream, _, model = target.partition("/")
    return Target(upstream, model)
