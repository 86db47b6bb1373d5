"""A trace: the first request on a new connection (cold), the rest on the same one (warm)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from firsttoken.geo.places import Place
from firsttoken.trace.endpoint import Endpoint
from firsttoken.trace.probe import Run, TraceError, probe, session, unreachable

DEFAULT_PROMPT = "In three sentences: why does a long-haul round trip cost more than the speed of light says?"


@dataclass
class Trace:
    target: Endpoint
    model: str
    origin: Place | None        # where the caller is, when known
    runs: list[Run]

    @property
    def floor_ms(self) -> float | None:
        region = self.target.region
        return self.origin.floor_ms(region) if self.origin is not None and region is not None else None


async def trace(target: Endpoint, *, model: str | None, prompt: str = DEFAULT_PROMPT, runs: int = 2,
                max_tokens: int = 64, origin: Place | None = None,
                progress: Callable[[str], None] = lambda _: None) -> Trace:
    """`progress` hears what is being done, for a person watching a trace that takes seconds."""
    if model is None:
        progress("asking the endpoint for its models")
        model = await first_model(target)
    body = target.body(model, prompt, max_tokens)
    done: list[Run] = []
    async with session() as client:
        for index in range(runs):
            progress(f"run {index + 1} of {runs}: {'a new' if index == 0 else 'the same'} connection, {model}")
            run = await probe(client, target, body)
            run.timeline.floor_ms = origin.floor_ms(target.region) if origin and target.region else None
            done.append(run)
            if run.error and run.timeline.status in (400, 401, 403, 404):
                break  # the same request will only be refused again
    return Trace(target, model, origin, done)


async def first_model(target: Endpoint) -> str:
    """The endpoint's first listed model, asked on a connection of its own so the cold run stays cold."""
    headers = {k: v for k, v in target.headers().items() if k not in ("content-type", "accept")}
    try:
        async with aiohttp.ClientSession() as client, client.get(
                target.models_url(), headers=headers, timeout=aiohttp.ClientTimeout(total=30)) as response:
            body = await response.read()
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise unreachable(target, target.models_url(), exc) from exc
    try:
        data: Any = orjson.loads(body).get("data")
        return str(data[0]["id"])
    except (orjson.JSONDecodeError, AttributeError, LookupError, TypeError):
        raise TraceError(f"{target.models_url()} answered HTTP {response.status} without a model list; "
                         f"give one with --model") from None
