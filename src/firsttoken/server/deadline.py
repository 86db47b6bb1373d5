"""The client's own deadline: how long it will wait (x-firsttoken-timeout, or the read timeout its SDK
announces), set once for the request's task and so for its hedges' tasks. No attempt waits past it and
none starts after it."""

from __future__ import annotations

import math
from contextvars import ContextVar
from dataclasses import dataclass

from firsttoken.errors import CLIENT_GAVE_UP, GatewayError
from firsttoken.server.http import Headers


@dataclass(frozen=True, slots=True)
class ClientDeadline:
    """When the client stops waiting (on the alarms' clock), and the header that said so."""
    at: float
    seconds: float
    header: str

    @classmethod
    def from_headers(cls, headers: Headers, stream: bool, now: float) -> ClientDeadline | None:
        """How long the client will wait: `x-firsttoken-timeout` (seconds) when it says; else, for an answer
        that is not streamed, the read timeout the OpenAI and Anthropic SDKs announce (x-stainless-read-timeout:
        nothing reaches the client before the answer, so it gives up after that). A stream's heartbeats keep
        its reads alive, so the SDK's read timeout does not bound it."""
        for name, value in headers:
            if name == b"x-firsttoken-timeout" or (name == b"x-stainless-read-timeout" and not stream):
                try:
                    seconds = float(value)
                except ValueError:
                    if name == b"x-firsttoken-timeout":
                        raise GatewayError(400, f"x-firsttoken-timeout must be a number of seconds, got "
                                                f"{value.decode(errors='replace')!r}.", param="x-firsttoken-timeout",
                                           code="invalid_header") from None
                    continue
                if seconds > 0 and math.isfinite(seconds):
                    return cls(now + seconds, seconds, name.decode())
        return None

    def passed(self) -> GatewayError:
        return GatewayError(504, f"No answer came within the {self.seconds:g} s this request allowed "
                                 f"({self.header}); nothing more was tried. Allow longer, or try again.",
                            "timeout_error", code=CLIENT_GAVE_UP)


CLIENT_DEADLINE: ContextVar[ClientDeadline | None] = ContextVar("client_deadline", default=None)


def passed_if_clients(deadline: float) -> GatewayError | None:
    """The client's deadline error when `deadline` is the client's own (else an upstream's timeout ran)."""
    client = CLIENT_DEADLINE.get()
    return client.passed() if client is not None and deadline == client.at else None
