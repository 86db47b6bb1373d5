"""Task sizing: rules on their own, and the `auto` alias through the real gateway: a short extraction goes
to the small tier, a hard reasoning question to the large one, the decision and its reason are in
x-firsttoken-size, and a request can opt out."""

from __future__ import annotations

import openai
import pytest

from conftest import CLIENT_KEY
from firsttoken.routing.sizing import by_rules, examples
from support.gateway_process import GatewayProcess
from support.openai_upstream import UPSTREAM_KEY
from support.waiting import within


@pytest.mark.parametrize(("text", "kind"), [
    ("Extract every email address from this text: write to ada@example.ng", "extraction"),
    ("Classify the sentiment of this review: the food was cold.", "classification"),
    ("Write a Python function that reverses a linked list.", "code"),
    ("Solve for x: 3x + 7 = 22. Show it step by step.", "reasoning"),
    ("Write a 500-word essay on the history of Lagos.", "long-form"),
    ("What is the capital of Kenya?", "short"),
    ("I had a rough day and just want to talk.", None),
    ("Classify the sentiment of this review. " + "The room was fine, the staff polite. " * 150, "classification"),
    ("Here are my notes. " * 600 + "Now write a 500-word essay from them.", "long-form"),
    ("Solve this: if a train leaves Lagos at 9 with " + "its carriages full of traders and their goods, " * 6
     + "then how long until it reaches Ibadan, 130 km away, at 60 km/h?", "reasoning"),
])
def test_rules(text: str, kind: str | None) -> None:
    assert by_rules(text) == kind


def test_the_labelled_examples_ship_with_the_package() -> None:
    kinds = {kind for _, kind in examples()}
    assert len(examples()) == 99 and kinds == {"classification", "extraction", "short", "chat", "code",
                                               "reasoning", "long-form"}


def test_auto_sends_small_tasks_to_the_small_tier_and_says_why(upstream, tmp_path) -> None:
    settings = {"upstreams": {"fake": {"url": upstream.url, "key": UPSTREAM_KEY}},
                "models": {"big": ["fake/inspect"]},
                "sizing": {"tiers": {"small": ["fake/echo"], "large": ["big"]}, "default": "large",
                           "kinds": {"extraction": "small", "classification": "small", "short": "small"},
                           "neighbours": False},
                "keys": [{"name": "app", "key": CLIENT_KEY}]}
    with GatewayProcess(settings, tmp_path) as gateway:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)

        def ask(text: str, **headers: str) -> tuple[str, str]:
            raw = client.chat.completions.with_raw_response.create(
                model="auto", messages=[{"role": "user", "content": text}], extra_headers=headers)
            return raw.headers["x-firsttoken-size"], raw.headers["x-firsttoken-route"]

        extraction = "Extract the invoice number from: INV-2231, due 3 May."
        assert ask(extraction) == ("extraction; tier=small; by=rules", "fake/echo")
        assert ask("Prove that the square root of 2 is irrational.") == ("reasoning; tier=large; by=rules",
                                                                          "fake/inspect")
        assert ask(extraction, **{"x-firsttoken-size": "off"}) == ("off; tier=large", "fake/inspect")


def test_the_neighbours_size_what_no_rule_knows() -> None:
    from firsttoken.cache.embed import load_embedder
    from firsttoken.routing.sizing import Sizer

    sizer = Sizer(load_embedder())
    puzzle = "Mary's mother has four children: April, May, June and who else?"
    assert by_rules(puzzle) is None
    assert sizer.size(puzzle) == sizer.by_neighbours(puzzle) and sizer.size(puzzle).kind == "reasoning"
    assert sizer.size("Pretend you are a pirate captain greeting new crew.").kind == "chat"


@pytest.mark.parametrize("attack", ["if x then y " * 2000, "extract x from " * 3000, "select a from " * 2000,
                                    "how many cats does if each " * 2000, "if " * 5000 + "then ?"])
def test_the_rules_cost_stays_bounded_whatever_the_prompt(attack: str) -> None:
    import time

    started = time.process_time()
    by_rules(attack)
    # Unbounded gaps took 15 s on the first of these; bounded ones take tens of ms at most (of this
    # process's own CPU time, with room for a slow one).
    assert time.process_time() - started < within(0.1)
