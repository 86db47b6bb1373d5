"""What an upstream adapter is: the request to send for each operation, and how to read the answer.

Adapters only shape requests and translate answers; the bytes move through the warm pool.
The OpenAI wire format is the gateway's own, so its adapter passes streams through untouched
and others translate each event into OpenAI chunks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from firsttoken.answers import NotAnAnswer, completion_body, embeddings_body
from firsttoken.config import Upstream
from firsttoken.errors import GatewayError, bad_gateway, upstream_status_error
from firsttoken.redact import Redactor


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    url: str
    headers: dict[str, str]
    data: bytes
    native: bool = False  # in the client's own format: the answer goes back to it as it came


class StreamTranslator(Protocol):
    """Turns one upstream SSE event into zero or more OpenAI SSE events (each ending in a blank line)."""

    def feed(self, event: bytes) -> list[bytes]: ...

    def finish(self) -> list[bytes]:
        """Events owed at the end of the upstream stream (for example the final `data: [DONE]`)."""
        ...


class Adapter:
    """Base for adapters; subclasses say how each operation looks on their wire."""

    api = "base"
    probe_lists_models = True  # whether the probe's answer is the list of models a client may name

    def __init__(self, name: str, settings: Upstream) -> None:
        self.name = name
        self.settings = settings
        self._secret = settings.key.get_secret_value() if settings.key is not None else ""
        self.redactor = Redactor(settings.secrets())

    def chat(self, body: dict[str, Any], model: str, stream: bool) -> UpstreamRequest:
        raise NotImplementedError

    def speaks(self, client_format: str) -> bool:
        """Whether it takes requests in that client format (formats/) as they come."""
        return False

    def native(self, body: dict[str, Any], model: str, stream: bool,
               client_headers: Sequence[tuple[bytes, bytes]]) -> UpstreamRequest:
        """The client's request, in this upstream's own format, sent as it came but for the model."""
        raise NotImplementedError(f"{self.api} upstreams take no request in a format of their own")

    def count_tokens(self, body: dict[str, Any], model: str,
                     client_headers: Sequence[tuple[bytes, bytes]]) -> UpstreamRequest:
        raise NotImplementedError(f"{self.api} upstreams count no Messages request")

    def chat_response(self, body: bytes) -> bytes:
        """A non-streaming answer in OpenAI's shape; a 502 when the upstream's 200 is not a chat completion
        (a page, a body cut in half)."""
        try:
            completion_body(body)
        except NotAnAnswer as exc:
            raise self.not_an_answer("a chat completion", exc) from None
        return body

    def embeddings_response(self, body: bytes) -> bytes:
        try:
            embeddings_body(body)
        except NotAnAnswer as exc:
            raise self.not_an_answer("a list of embeddings", exc) from None
        return body

    def not_an_answer(self, what: str, why: object) -> GatewayError:
        return bad_gateway(self.redactor.text(f"upstream {self.name} answered with something that is not {what}: "
                                              f"{why}"), code="upstream_bad_response")

    def stream_translator(self, include_usage: bool, native: bool = False) -> StreamTranslator | None:
        """None means the stream is already OpenAI's and passes through byte for byte. `native`: the answer to
        a request in the client's own format (`native`), read only."""
        return None

    def native_response(self, body: bytes) -> bytes:
        """A whole answer to a `native` request, in OpenAI's chat shape (to be read and kept)."""
        return self.chat_response(body)

    def embeddings(self, body: dict[str, Any], model: str) -> UpstreamRequest:
        raise GatewayError(400, f"upstream {self.name} ({self.api}) has no embeddings endpoint; "
                                f"route embeddings to an OpenAI-compatible upstream", param="model")

    def probe(self) -> tuple[str, dict[str, str]]:
        """A cheap authenticated GET that keeps a connection warm and, where it can, lists models."""
        raise NotImplementedError

    def error(self, status: int, body: bytes) -> GatewayError:
        """The upstream's refusal in OpenAI's shape, without our credentials: its body scrubbed as sent, and
        its message again once decoded (JSON may have spelled the key in escapes)."""
        error = upstream_status_error(status, self.scrub(body), self.name)
        error.message, error.type = self.redactor.text(error.message), self.redactor.text(error.type)
        error.param, error.code = (self.redactor.text(x) if isinstance(x, str) else x
                                   for x in (error.param, error.code))
        return error

    def scrub(self, data: bytes) -> bytes:
        """Remove the credentials we send (or a long prefix of one) from anything the upstream says back:
        some quote the key in errors, in error bodies and in-stream error events alike."""
        return self.redactor.bytes(data)

    def _headers(self, auth: dict[str, str]) -> dict[str, str]:
        return {"Content-Type": "application/json", "Accept-Encoding": "identity", **self.settings.headers, **auth}
