"""The exact key: the same for requests that must get the same answer, different for any that may not."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from firsttoken.cache.key import DELIVERY_ONLY, exact_key

BODY = {"model": "chat", "messages": [{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": "Is the museum open on Mondays?"}],
        "temperature": 0, "max_tokens": 50}
TARGETS = ["openai/gpt-4o-mini"]


def key(body: dict, tenant: str = "app", targets: list[str] = TARGETS) -> str:
    return exact_key(tenant, targets, body)


def test_delivery_fields_and_field_order_do_not_change_the_key() -> None:
    reordered = dict(reversed(list(BODY.items())))
    delivery = {**BODY, "stream": True, "stream_options": {"include_usage": True}, "user": "u1", "metadata": {"a": 1}}
    assert key(BODY) == key(reordered) == key(delivery)
    assert key({**BODY, "temperature": 0.0}) == key(BODY)  # a number, however written
    assert key({**BODY, "model": "other-alias"}) == key(BODY)  # the targets decide, not the name asked for


def test_everything_that_shapes_the_answer_changes_the_key() -> None:
    base = key(BODY)
    variants = [
        {**BODY, "messages": [BODY["messages"][0], {"role": "user", "content": "Is the museum closed on Mondays?"}]},
        {**BODY, "messages": [{"role": "system", "content": "Be verbose."}, BODY["messages"][1]]},
        {**BODY, "temperature": 0.7}, {**BODY, "max_tokens": 51}, {**BODY, "seed": 1}, {**BODY, "top_p": 0.5},
        {**BODY, "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
        {**BODY, "response_format": {"type": "json_object"}}, {**BODY, "stop": ["\n"]}, {**BODY, "n": 2},
        {**BODY, "logprobs": True}, {**BODY, "reasoning_effort": "high"}, {**BODY, "some_future_field": 1},
    ]
    keys = {key(v) for v in variants}
    assert base not in keys and len(keys) == len(variants)
    assert key(BODY, tenant="other") != base
    assert key(BODY, targets=["anthropic/claude-haiku"]) != base
    assert key(BODY, targets=[*TARGETS, "b/m"]) != base


@given(st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: k not in DELIVERY_ONLY and k not in BODY),
                       st.one_of(st.integers(-2**63, 2**63 - 1), st.text(max_size=5), st.booleans(), st.none()),
                       min_size=1, max_size=5))
def test_any_other_field_is_part_of_the_key(extra: dict) -> None:
    assert key({**BODY, **extra}) != key(BODY)
    assert key({**extra, **BODY}) == key({**BODY, **extra})
