"""What a client's wire format is to the gateway: how a request in it is read, and how answers, streams and
errors are written back in it.

The gateway reasons in one form, OpenAI's chat completions: sizing, limits, the cache's prompt, the relay's
reading of a stream, what it keeps. A format reads its requests into that form (`Parsed.chat`), and each
request's `Answering` writes what the gateway answers in that form back in the client's (`whole`,
`writer`, `error_body`). An upstream that speaks the format itself (its adapter `speaks` it) is sent the
client's request as it came (`Parsed.native`), and its answer passes through untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from firsttoken.errors import GatewayError

Json = dict[str, Any]


class StreamWriter(Protocol):
    """One stream's writes (whole chat events, as a chat client would get them) in the client's format."""

    def write(self, data: bytes) -> bytes: ...


class Answering(Protocol):
    """How one request is answered in its client's format."""

    def writer(self) -> StreamWriter | None:
        """A new stream's writer; None when chat events go out as they are."""
        ...

    def whole(self, answer: bytes, native: bytes | None = None) -> bytes:
        """A whole chat.completion as this format's answer; `native`: the upstream's own answer, already in
        this format (an upstream that speaks it)."""
        ...

    def error_body(self, error: GatewayError) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Parsed:
    """A request read from a client's format."""
    model: str
    stream: bool
    chat: Json  # the request as a chat completion body
    keyed: Json  # what shapes its answer, in the client's format: the exact cache key's request
    answering: Answering
    native: Json  # the request as an upstream that speaks the client's format is sent it
    # Why `chat` leaves out part of the request, when it does: a chat upstream refuses it with this error,
    # an upstream that speaks the format takes it whole.
    untranslatable: GatewayError | None = None


class ClientFormat(Answering, Protocol):
    name: str  # as journeys and metrics name the route's format; what an adapter `speaks`

    def parse(self, body: Json, headers: Sequence[tuple[bytes, bytes]], tenant: str) -> Parsed:
        """The request checked and read (a GatewayError 400 when it is not one); `tenant` is whose it is."""
        ...
