"""Properties of the parsers of the two client formats read into chat's form (Anthropic Messages, OpenAI
Responses): whatever JSON object comes, each either refuses it with a 400 that names a field, or reads it
into a chat completion request that the gateway's own chat checks accept. No other exception, whatever the
types, nesting or values. bench/fuzz.py runs the same properties on many more bodies."""

from __future__ import annotations

from hypothesis import given, settings

from firsttoken.errors import GatewayError
from firsttoken.formats import messages_request
from support.wire_properties import (
    messages_bodies,
    messages_body_is_refused_or_read,
    responses_bodies,
    responses_body_is_refused_or_read,
)


@settings(max_examples=600, deadline=None)
@given(body=messages_bodies)
def test_a_messages_body_is_refused_by_name_or_read_into_a_chat_request(body: dict) -> None:
    messages_body_is_refused_or_read(body)


@settings(max_examples=600, deadline=None)
@given(body=responses_bodies)
def test_a_responses_body_is_refused_by_name_or_read_into_a_chat_request(body: dict) -> None:
    responses_body_is_refused_or_read(body)


def test_a_count_written_with_a_fraction_counts_and_a_huge_one_is_refused() -> None:
    """4096.0 is 4096; 1e300 has no exact integer (and a 64-bit serialiser would fail on its int): a 400."""
    body = {"model": "m", "max_tokens": 4096.0, "messages": [{"role": "user", "content": "hi"}]}
    messages_request.check(body)
    assert body["max_tokens"] == 4096 and isinstance(body["max_tokens"], int)
    for huge in (1e300, 2.0**60, -4.0, 0.5):
        try:
            messages_request.check({**body, "max_tokens": huge})
        except GatewayError as error:
            assert error.status == 400 and error.param == "max_tokens"
        else:
            raise AssertionError(f"max_tokens {huge} was taken")
