"""A provider's API, as its published profile says it serves: the first token a log-normal time after the
request arrives (its median the profile's), then one token every `itl_ms`. It does not depend on the load:
what a provider's queue does is in its published median, not modelled."""

from __future__ import annotations

import numpy as np

from firsttoken.plan.journey import Journey
from firsttoken.plan.scenario import ProviderApi

TTFT_SIGMA = 0.25  # the spread of a provider's time to first token around its median (of the log), chosen


def first_token_s(api: ProviderApi, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` times from a request's arrival at the provider to its first token."""
    return rng.lognormal(np.log(api.ttft_ms / 1000), TTFT_SIGMA, count)


def answer(api: ProviderApi, journeys: list[Journey], rng: np.random.Generator) -> None:
    """Each journey's times at the provider, from its arrival there."""
    for journey, ttft in zip(journeys, first_token_s(api, len(journeys), rng), strict=True):
        journey.admitted = journey.arrived
        journey.first_token = journey.arrived + float(ttft)
        journey.finished = journey.first_token + (journey.answer - 1) * api.itl_ms / 1000
