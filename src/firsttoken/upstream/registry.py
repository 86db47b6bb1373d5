"""The configured upstreams: each one's adapter (what to send) beside its warm pool (how it moves)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from firsttoken.config import Upstream
from firsttoken.geo.places import Place
from firsttoken.upstream.adapter import Adapter
from firsttoken.upstream.anthropic import AnthropicAdapter
from firsttoken.upstream.azure import AzureAdapter
from firsttoken.upstream.openai import OpenAIAdapter
from firsttoken.upstream.pool import WarmPool

ADAPTERS: dict[str, type[Adapter]] = {"openai": OpenAIAdapter, "anthropic": AnthropicAdapter, "azure": AzureAdapter}


@dataclass(slots=True)
class UpstreamLink:
    name: str
    settings: Upstream
    adapter: Adapter
    pool: WarmPool
    floor_ms: float | None = None  # the physics floor from the gateway's location to this upstream's region

    def listed_models(self) -> list[str]:
        return self.pool.state.models if self.adapter.probe_lists_models else []


class Upstreams:
    def __init__(self, settings: dict[str, Upstream], location: Place | None = None) -> None:
        self.links: dict[str, UpstreamLink] = {}
        for name, upstream in settings.items():
            adapter = ADAPTERS[upstream.api](name, upstream)
            floor = location.floor_ms(upstream.place) if location is not None and upstream.place is not None else None
            self.links[name] = UpstreamLink(name, upstream, adapter, WarmPool(name, upstream, adapter.probe()), floor)

    def __getitem__(self, name: str) -> UpstreamLink:
        return self.links[name]

    def listed_models(self, name: str) -> list[str]:
        return self.links[name].listed_models()

    async def start(self) -> None:
        await asyncio.gather(*(link.pool.start() for link in self.links.values()))

    async def close(self) -> None:
        await asyncio.gather(*(link.pool.close() for link in self.links.values()), return_exceptions=True)

    def ready(self) -> bool:
        states = [link.pool.state for link in self.links.values()]
        return bool(states) and all(s.attempted for s in states) and any(s.warm for s in states)
