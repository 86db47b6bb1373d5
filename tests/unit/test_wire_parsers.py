"""Properties of the parsers of the two client formats read into chat's form (Anthropic Messages, OpenAI
Responses): whatever JSON object comes, each either refuses it with a 400 that names a field, or reads it
into a chat completion request that the gateway's own chat checks accept. No other exception, whatever the
types, nesting or values. bench/fuzz.py runs the same properties on many more bodies."""

from __future__ import annotations

from hypothesis import given, settings

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
