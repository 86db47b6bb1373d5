"""What one request cost and what the edge saved it, from its timeline: its tokens (the upstream's usage,
or the gateway's estimate, marked, when the upstream gave none) at its route's price.

A route is priced per million tokens (the config's price, else the shipped table's for its model) or per
GPU-hour (a self-hosted target, the simulated region included): a request then pays for its share of
the GPUs' time while it held them, the seconds it took divided among the requests in flight on that
target when it was sent. Idle GPU-hours are nobody's request and are not charged to any key.

Savings: a cache hit or a joined request did not go upstream (a semantic hit found after its request left
cancelled that request, whose prompt it still counts as spent), so it saved what its answer cost when it
did (the answer's own usage at its route's price) and the seconds the route takes to give it (its
measured time to a first token and decode rate, spend/speeds.py), less what the replay took. A request
sized down saved the difference between its tokens at the unsized route's price and at its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from time import perf_counter
from typing import Any, NamedTuple

from firsttoken.cache.outcome import CacheOutcome
from firsttoken.journey.timeline import Timeline
from firsttoken.prices.shipped import ApiPrice, api_prices
from firsttoken.spend.speeds import Speeds
from firsttoken.spend.usage import Tokens

PER_MILLION = 1e-6


@dataclass(frozen=True, slots=True)
class TokenRate:
    """USD per million tokens of each kind."""

    input: float
    output: float
    cached_input: float
    cache_write: float  # Anthropic's 5-minute cache writes, and every other provider's
    cache_write_1h: float  # Anthropic's 1-hour cache writes
    source: str

    def usd(self, tokens: Tokens) -> float:
        plain = max(tokens.input - tokens.cached_input - tokens.cache_write, 0)
        return (plain * self.input + tokens.cached_input * self.cached_input
                + (tokens.cache_write - tokens.cache_write_1h) * self.cache_write
                + tokens.cache_write_1h * self.cache_write_1h + tokens.output * self.output) * PER_MILLION

    @classmethod
    def given(cls, input_price: float, output: float, cached_input: float | None, cache_write: float | None,
              cache_write_1h: float | None, source: str) -> TokenRate:
        """A price as a table or the config gives it: cached input and cache writes cost the input's price
        unless given, and writes kept an hour the cache writes'."""
        write = input_price if cache_write is None else cache_write
        return cls(input_price, output, input_price if cached_input is None else cached_input, write,
                   write if cache_write_1h is None else cache_write_1h, source)

    @classmethod
    def from_table(cls, row: ApiPrice) -> TokenRate:
        return cls.given(row.usd_per_million_input, row.usd_per_million_output, row.usd_per_million_cached_input,
                         row.usd_per_million_cache_write, row.usd_per_million_cache_write_1h,
                         f"{row.provider}/{row.model}, {row.source}, {row.date}")


@dataclass(frozen=True, slots=True)
class GpuRate:
    """A self-hosted target: USD per GPU-hour, and the GPUs one replica of its model holds."""

    usd_per_gpu_hour: float
    gpus: int
    source: str

    def usd(self, seconds: float, sharing: int) -> float:
        """A request's share of the GPUs over the `seconds` it held them with `sharing` requests in flight."""
        return self.usd_per_gpu_hour * self.gpus * seconds / 3600.0 / max(sharing, 1)


Rate = TokenRate | GpuRate


class Cost(NamedTuple):
    """What one request cost upstream, and what the edge saved it. (A named tuple: made for every request.)"""

    tokens: Tokens | None  # what the upstream used; a hit's or joined request's: None (see `reused`)
    estimated: bool  # the upstream gave no usage: the tokens are the gateway's estimate
    usd: float | None  # None: its route has no price
    saved_by: str = ""  # "cache", "joined", "sized" or ""
    saved_tokens: int = 0  # tokens the upstream did not have to process
    saved_usd: float = 0.0
    saved_s: float | None = None  # None: the route's speed is not known yet

    def as_dict(self) -> dict[str, Any]:
        """As a journey says it (GET /v1/journeys/{id}, the dashboard)."""
        t = self.tokens
        return {"usd": self.usd, "estimated": self.estimated,
                "tokens": None if t is None else {"input": t.input, "cached_input": t.cached_input,
                                                  "cache_write": t.cache_write, "cache_write_1h": t.cache_write_1h,
                                                  "output": t.output, "reasoning": t.reasoning},
                "saved": {"by": self.saved_by, "usd": self.saved_usd, "tokens": self.saved_tokens,
                          "seconds": self.saved_s} if self.saved_by else None}

    def header(self) -> bytes:
        """The x-firsttoken-cost value: `usd=…; input=…; output=…`, and what was saved. (Bytes formatted in
        place: said on every answer, and a list of str parts joined and encoded took twice as long.)"""
        said = b"usd=unknown" if self.usd is None else b"usd=%.8f" % self.usd
        t = self.tokens
        if t is not None:
            said += b"; input=%d; cached-input=%d; output=%d" % (t.input, t.cached_input, t.output)
            if t.cache_write:
                said += b"; cache-write=%d" % t.cache_write
            if t.cache_write_1h:
                said += b"; cache-write-1h=%d" % t.cache_write_1h
            if t.reasoning:
                said += b"; reasoning=%d" % t.reasoning
        if self.estimated:
            said += b"; estimated"
        if self.saved_by:
            said += b"; saved-by=%s; saved-usd=%.8f; saved-tokens=%d" % (self.saved_by.encode(), self.saved_usd,
                                                                         self.saved_tokens)
            if self.saved_s is not None:
                said += b"; saved-s=%.3f" % self.saved_s
        return said


NOTHING = Cost(None, False, 0.0)  # a request that never reached an upstream (refused, failed before sending)
_DATED = re.compile(r"-(\d{8}|\d{4}-\d{2}-\d{2}|latest)$")


class Pricing:
    """Routes (`upstream/model`) to their rates, resolved once each; and the routes' measured speeds."""

    def __init__(self, configured: dict[str, Rate], upstream_rates: dict[str, Rate] | None = None) -> None:
        self._configured = configured  # by `upstream/model`, or by model on any upstream
        self._upstream_rates = upstream_rates or {}  # a whole upstream priced per GPU-hour (the simulated region)
        self._table = {row.model: TokenRate.from_table(row) for row in api_prices()}
        self._resolved: dict[str, Rate | None] = {}
        self.speeds = Speeds()

    def rate(self, route: str) -> Rate | None:
        """The price of `route`: the config's for it or its model, the upstream's, else the shipped table's."""
        try:
            return self._resolved[route]
        except KeyError:
            rate = self._resolved[route] = self._resolve(route)
            return rate

    def _resolve(self, route: str) -> Rate | None:
        upstream, _, model = route.partition("/")
        found = self._configured.get(route) or self._configured.get(model) or self._upstream_rates.get(upstream)
        if found is not None:
            return found
        for name in (model, _DATED.sub("", model), model.rpartition("/")[2], _DATED.sub("", model.rpartition("/")[2])):
            if name in self._table:
                return self._table[name]
        return None

    def cost(self, timeline: Timeline) -> Cost:
        """What the request cost and saved, by its timeline so far (its last byte, when it has ended)."""
        if timeline.cache.from_cache:
            return self._reused(timeline)
        if not timeline.sent:
            return NOTHING
        tokens, estimated = Tokens.of(timeline), False
        if tokens is None:  # the upstream said nothing: the prompt as estimated, a token per token event
            tokens, estimated = Tokens(timeline.prompt_estimate, timeline.token_events), True
        rate = self.rate(timeline.route)
        usd = self._usd(rate, tokens, timeline)
        if not timeline.sized_from or usd is None:
            return Cost(tokens, estimated, usd)
        unsized = self._usd(self.rate(timeline.sized_from), tokens, timeline)
        if unsized is None or unsized <= usd:  # sized to a tier that costs no less: nothing saved
            return Cost(tokens, estimated, usd)
        expected = self.speeds.seconds(timeline.sized_from, tokens.output)
        taken = _seconds(timeline)
        return Cost(tokens, estimated, usd, "sized", 0, unsized - usd,
                    None if expected is None else max(expected - taken, 0.0))

    def _reused(self, timeline: Timeline) -> Cost:
        tokens = timeline.reused_tokens
        saved_by = "joined" if timeline.cache is CacheOutcome.JOINED else "cache"
        spent, spent_usd = self._cancelled(timeline)
        if tokens is None:  # an answer without usage: nothing to count
            return Cost(spent, spent is not None, spent_usd, saved_by)
        expected = self.speeds.seconds(timeline.route, tokens.output)
        rate = self.rate(timeline.route)
        if isinstance(rate, GpuRate):  # the GPU time it would have held, alone on its replica
            saved_usd = rate.usd(expected, 1) if expected is not None else 0.0
        else:
            saved_usd = rate.usd(tokens) if rate is not None else 0.0
        saved_s = None if expected is None else max(expected - _seconds(timeline), 0.0)
        return Cost(spent, spent is not None, spent_usd, saved_by, tokens.total, saved_usd, saved_s)

    def _cancelled(self, timeline: Timeline) -> tuple[Tokens | None, float]:
        """What the upstream request that a semantic hit cancelled may cost (Timeline.raced): its prompt, as
        estimated, at its route's input price, as if the provider billed all of it (it stopped before its
        first token, so no output). Nothing when the hit was found before the request left."""
        if not (timeline.raced and timeline.sent):
            return None, 0.0
        tokens = Tokens(timeline.prompt_estimate, 0)
        rate = self.rate(timeline.raced)
        if isinstance(rate, GpuRate):  # the GPU time it held until it was cancelled
            return tokens, rate.usd(max((timeline.last_byte or perf_counter()) - timeline.sent, 0.0), timeline.sharing)
        return tokens, rate.usd(tokens) if rate is not None else 0.0

    @staticmethod
    def _usd(rate: Rate | None, tokens: Tokens, timeline: Timeline) -> float | None:
        if rate is None:
            return None
        if isinstance(rate, GpuRate):
            return rate.usd(_seconds(timeline), timeline.sharing)
        return rate.usd(tokens)


def _seconds(timeline: Timeline) -> float:
    """How long the request has taken from its sending upstream (or its arrival) to its last byte."""
    start = timeline.sent or timeline.received
    return max((timeline.last_byte or perf_counter()) - start, 0.0)
