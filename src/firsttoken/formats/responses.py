"""OpenAI's Responses API as a client format (POST /v1/responses)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from firsttoken.errors import GatewayError, bad_request
from firsttoken.formats import responses_request
from firsttoken.formats.client import Json, Parsed
from firsttoken.formats.response_store import ResponseStore
from firsttoken.formats.responses_answer import Draft, ResponseEvents, error_body


class ResponsesAnswering:
    """One response's answering: its events, its whole answer, errors in OpenAI's shape."""

    def __init__(self, draft: Draft) -> None:
        self.draft = draft

    def writer(self) -> ResponseEvents:
        return ResponseEvents(self.draft)

    def whole(self, answer: bytes) -> bytes:
        return self.draft.whole(answer)

    def error_body(self, error: GatewayError) -> bytes:
        return error_body(error)


class ResponsesFormat:
    name: str = "responses"
    native_api: str | None = None  # every upstream is sent the chat completion it amounts to

    def __init__(self, store: ResponseStore | None) -> None:
        self.store = store  # None: no response is kept, and none can be continued

    def parse(self, body: Json, headers: Sequence[tuple[bytes, bytes]], tenant: str) -> Parsed:
        model, stream = responses_request.check(body)
        items = [*self._previous(body.get("previous_response_id"), tenant), *responses_request.input_items(body)]
        chat = responses_request.chat_request(body, items)
        keep = None
        if self.store is not None and body.get("store") is not False:  # OpenAI keeps responses by default
            store = self.store

            def keep(response_id: str, output: list[Json]) -> None:
                store.put(tenant, response_id, [*items, *output])

        # The chat completion is all an upstream is sent: what shapes the answer is in it.
        return Parsed(model, stream, chat, {**chat, "format": self.name}, ResponsesAnswering(Draft(body, keep)))

    def _previous(self, response_id: Any, tenant: str) -> list[Json]:
        if response_id is None:
            return []
        if not isinstance(response_id, str) or not response_id:
            raise bad_request("'previous_response_id' must be a response's id.", param="previous_response_id",
                              code="invalid_type")
        if self.store is None:
            raise bad_request("This gateway keeps no responses (responses.store is off), so none can be continued; "
                              "send the whole conversation in 'input'.", param="previous_response_id",
                              code="previous_response_not_found")
        items = self.store.get(tenant, response_id)
        if items is None:
            raise GatewayError(404, f"Previous response with id '{response_id}' not found (it may have expired, or "
                                    f"been made with another key).", param="previous_response_id",
                               code="previous_response_not_found")
        return items

    def writer(self) -> None:
        return None

    def whole(self, answer: bytes) -> bytes:
        return answer

    def error_body(self, error: GatewayError) -> bytes:
        return error_body(error)
