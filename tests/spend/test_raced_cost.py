"""What a semantic hit found after its request left costs: the upstream request it cancelled may be billed
its prompt, so that prompt (as estimated) is counted at the cancelled route's input price; a hit found
before its request left costs nothing, as any hit."""

from __future__ import annotations

import pytest

from firsttoken.cache.outcome import CacheOutcome
from firsttoken.journey.timeline import Timeline
from firsttoken.spend.cost import Pricing, TokenRate
from firsttoken.spend.usage import Tokens

RATE = TokenRate.given(2.0, 8.0, None, None, None, "test")  # USD per million input and output tokens


def semantic_hit(raced: str = "", sent: bool = False) -> Timeline:
    timeline = Timeline("r1")
    timeline.cache, timeline.route = CacheOutcome.SEMANTIC_HIT, "up/model"
    timeline.reused_tokens = Tokens(1000, 500)  # what the stored answer cost when it went upstream
    timeline.prompt_estimate = 1200
    timeline.raced = raced
    if sent:
        timeline.sent = timeline.received
    return timeline


def test_a_hit_that_cancelled_its_request_counts_that_requests_prompt() -> None:
    cost = Pricing({"up/model": RATE}).cost(semantic_hit("up/model", sent=True))
    assert cost.usd == pytest.approx(1200 * 2.0 / 1e6)
    assert cost.tokens == Tokens(1200, 0) and cost.estimated
    assert cost.saved_by == "cache" and cost.saved_usd == pytest.approx((1000 * 2.0 + 500 * 8.0) / 1e6)


@pytest.mark.parametrize("timeline", [semantic_hit(), semantic_hit("up/model", sent=False)],
                         ids=["decided before it left", "cancelled before it was sent"])
def test_a_hit_whose_request_never_reached_the_upstream_costs_nothing(timeline: Timeline) -> None:
    cost = Pricing({"up/model": RATE}).cost(timeline)
    assert cost.usd == 0.0 and cost.tokens is None and not cost.estimated
