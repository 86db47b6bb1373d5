"""OpenAI's chat completions: the gateway's own form, read as it is and written back untouched."""

from __future__ import annotations

from collections.abc import Sequence

from firsttoken.errors import GatewayError
from firsttoken.formats.client import Json, Parsed
from firsttoken.server import validate


class ChatFormat:
    name: str = "chat"

    def parse(self, body: Json, headers: Sequence[tuple[bytes, bytes]], tenant: str) -> Parsed:
        model, stream = validate.chat_request(body)
        return Parsed(model, stream, body, body, self, body)

    def writer(self) -> None:
        return None

    def whole(self, answer: bytes, native: bytes | None = None) -> bytes:
        return answer

    def error_body(self, error: GatewayError) -> bytes:
        return error.to_bytes()


CHAT = ChatFormat()
