"""OpenAI's Responses API as a client format (POST /v1/responses)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from firsttoken.cache.key import DELIVERY_ONLY
from firsttoken.errors import GatewayError, bad_request
from firsttoken.formats import responses_request
from firsttoken.formats.client import Json, Parsed
from firsttoken.formats.response_store import ResponseStore
from firsttoken.formats.responses_answer import Draft, ResponseEvents, error_body

# Fields of a Responses request that change what comes back with the answer, or what is recorded of it, but
# not the answer: Codex CLI sends a new client_metadata (turn ids) with every request.
_NOT_ANSWERING = frozenset({"include", "client_metadata", "background", "model"})


class ResponsesAnswering:
    """One response's answering: its events, its whole answer, errors in OpenAI's shape."""

    def __init__(self, draft: Draft) -> None:
        self.draft = draft

    def writer(self) -> ResponseEvents:
        return ResponseEvents(self.draft)

    def whole(self, answer: bytes, native: bytes | None = None) -> bytes:
        if native is None:
            return self.draft.whole(answer)
        self.draft.kept(orjson.loads(native))
        return native

    def error_body(self, error: GatewayError) -> bytes:
        return error_body(error)


class ResponsesFormat:
    name: str = "responses"

    def __init__(self, store: ResponseStore | None) -> None:
        self.store = store  # None: no response is kept, and none can be continued

    def parse(self, body: Json, headers: Sequence[tuple[bytes, bytes]], tenant: str) -> Parsed:
        model, stream = responses_request.check(body)
        previous = body.get("previous_response_id")
        given = responses_request.input_items(body)
        items = [*self._previous(previous, tenant), *given]
        skipped: list[GatewayError] = []
        chat = responses_request.chat_request(body, items, skipped)
        keep = None
        if self.store is not None and body.get("store") is not False:  # OpenAI keeps responses by default
            store = self.store

            def keep(response_id: str, output: list[Json]) -> None:
                store.put(tenant, response_id, [*given, *output], previous)

        # The gateway keeps the conversations: an upstream that speaks Responses is sent the whole of it, so that
        # any of a model's upstreams can continue any response (and none need keep one).
        native = {key: value for key, value in body.items() if key != "previous_response_id"}
        # Reasoning the gateway wrote (from a chat upstream: no encrypted content) is no item an upstream knows.
        native["input"] = [item for item in items
                           if item.get("type") != "reasoning" or item.get("encrypted_content")]
        # What shapes the answer is in the chat completion, or in what a native upstream is sent.
        keyed = {**chat, "format": self.name,
                 "native": {k: v for k, v in native.items() if k not in DELIVERY_ONLY and k not in _NOT_ANSWERING}}
        return Parsed(model, stream, chat, keyed, ResponsesAnswering(Draft(body, keep)), native,
                      skipped[0] if skipped else None)

    def _previous(self, response_id: Any, tenant: str) -> list[Json]:
        if response_id is None:
            return []
        if not isinstance(response_id, str) or not response_id:
            raise bad_request("'previous_response_id' must be a response's id.", param="previous_response_id",
                              code="invalid_type")
        if self.store is None:
            raise GatewayError(404, "This gateway keeps no responses (responses.store is off), so none can be "
                                    "continued; send the whole conversation in 'input'.",
                               param="previous_response_id", code="previous_response_not_found")
        items = self.store.get(tenant, response_id)
        if items is None:
            raise GatewayError(404, f"Previous response with id '{response_id}' not found (it may have expired, or "
                                    f"been made with another key).", param="previous_response_id",
                               code="previous_response_not_found")
        return items

    def writer(self) -> None:
        return None

    def whole(self, answer: bytes, native: bytes | None = None) -> bytes:
        return answer

    def error_body(self, error: GatewayError) -> bytes:
        return error_body(error)
