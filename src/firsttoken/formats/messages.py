"""Anthropic's Messages API as a client format (POST /v1/messages)."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from firsttoken.errors import GatewayError
from firsttoken.formats import messages_request
from firsttoken.formats.client import Json, Parsed
from firsttoken.formats.messages_answer import MessagesEvents, error_object, message

_BETA = b"anthropic-beta"


class MessagesFormat:
    name: str = "messages"

    def parse(self, body: Json, headers: Sequence[tuple[bytes, bytes]], tenant: str) -> Parsed:
        model, stream = messages_request.check(body)
        # The betas a client turns on can change what the model says (context management, new tools): they
        # are part of what the answer is an answer to.
        betas = b",".join(value for name, value in headers if name == _BETA).decode("latin-1")
        keyed = {**body, "format": self.name, "betas": betas}
        skipped: list[GatewayError] = []
        chat = messages_request.chat_request(body, skipped)
        return Parsed(model, stream, chat, keyed, self, body, skipped[0] if skipped else None)

    def writer(self) -> MessagesEvents:
        return MessagesEvents()

    def whole(self, answer: bytes, native: bytes | None = None) -> bytes:
        return native if native is not None else orjson.dumps(message(orjson.loads(answer)))

    def error_body(self, error: GatewayError) -> bytes:
        return orjson.dumps(error_object(error))


MESSAGES = MessagesFormat()
