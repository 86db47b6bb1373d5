"""Properties of the parsers of the two client formats read into chat's form (Anthropic Messages, OpenAI
Responses): whatever JSON object comes, each either refuses it with a 400 that names a field, or reads it
into a chat completion request that the gateway's own chat checks accept. No other exception, whatever the
types, nesting or values."""

from __future__ import annotations

from hypothesis import given, settings

from firsttoken.errors import GatewayError
from firsttoken.formats import messages_request, responses_request
from firsttoken.server import validate
from support.wire_bodies import messages_bodies, responses_bodies


def refused_with_a_field(error: GatewayError) -> None:
    assert error.status == 400 and error.message, error


@settings(max_examples=600, deadline=None)
@given(body=messages_bodies)
def test_a_messages_body_is_refused_by_name_or_read_into_a_chat_request(body: dict) -> None:
    try:
        messages_request.check(body)
        skipped: list[GatewayError] = []
        chat = messages_request.chat_request(body, skipped)
    except GatewayError as error:
        refused_with_a_field(error)
        return
    for why in skipped:
        refused_with_a_field(why)
    if not skipped:
        validate.chat_request(chat)  # what it reads is a request the gateway itself accepts


@settings(max_examples=600, deadline=None)
@given(body=responses_bodies)
def test_a_responses_body_is_refused_by_name_or_read_into_a_chat_request(body: dict) -> None:
    try:
        responses_request.check(body)
        skipped: list[GatewayError] = []
        chat = responses_request.chat_request(body, responses_request.input_items(body), skipped)
    except GatewayError as error:
        refused_with_a_field(error)
        return
    for why in skipped:
        refused_with_a_field(why)
    if not skipped:
        validate.chat_request(chat)
