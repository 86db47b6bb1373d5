"""How fast each route answers, as measured: a decaying mean of its time to a first token and of its
decode rate, from the requests it served. What a cache hit saved in seconds is what its route would
have taken to give the same answer."""

from __future__ import annotations

from dataclasses import dataclass

from firsttoken.journey.timeline import Timeline

WEIGHT = 0.2  # each new request's share of the mean: the last few dozen requests count


@dataclass(slots=True)
class Speed:
    ttft_s: float
    tokens_per_s: float | None  # None until a request of more than one token is seen


class Speeds:
    def __init__(self) -> None:
        self._routes: dict[str, Speed] = {}

    def observe(self, timeline: Timeline) -> None:
        """A request that went upstream and got its answer: a stream shows both speeds; a whole answer only
        its total, which is its time to a first token once the route's decode rate is known."""
        if not (timeline.sent and timeline.route and timeline.last_byte) or timeline.status >= 400 \
                or timeline.cache.from_cache or timeline.error_code:
            return
        tokens = timeline.output_tokens if timeline.output_tokens is not None else timeline.token_events
        speed = self._routes.get(timeline.route)
        if timeline.first_token:
            ttft = timeline.first_token - timeline.received
            decoded = (timeline.last_token or timeline.first_token) - timeline.first_token
            rate = (tokens - 1) / decoded if tokens > 1 and decoded > 0 else None
        else:
            rate = None
            ttft = timeline.last_byte - timeline.received
            if speed is not None and speed.tokens_per_s and tokens > 1:
                ttft = max(ttft - (tokens - 1) / speed.tokens_per_s, 0.0)
        if speed is None:
            self._routes[timeline.route] = Speed(ttft, rate)
            return
        speed.ttft_s += WEIGHT * (ttft - speed.ttft_s)
        if rate is not None:
            speed.tokens_per_s = rate if speed.tokens_per_s is None else \
                speed.tokens_per_s + WEIGHT * (rate - speed.tokens_per_s)

    def seconds(self, route: str, output_tokens: int) -> float | None:
        """The seconds `route` takes, by its measured speed, to answer with `output_tokens`; None when unknown."""
        speed = self._routes.get(route)
        if speed is None:
            return None
        if output_tokens <= 1 or speed.tokens_per_s is None:
            return speed.ttft_s
        return speed.ttft_s + (output_tokens - 1) / speed.tokens_per_s
