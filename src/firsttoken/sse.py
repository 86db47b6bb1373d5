"""Server-sent events at the byte level.

The relay must find event boundaries and the first token without decoding and re-encoding every
chunk, which is what SSE libraries do (they parse into fields); so this small splitter is by hand.
"""

from __future__ import annotations

from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"
HEARTBEAT = b": keep-alive\n\n"
CLOSING = b": server-timing"  # how the comment that ends every stream begins (Timeline.closing_comment)
BROKEN = "upstream_stream_broken"  # the code of the error that ends a stream which broke or was cut


# The longest event an upstream may send. Chat chunks are small; the largest real events (a Responses
# stream's `response.completed`, which repeats the whole output) are well under it. Past it the upstream
# is not streaming events, and holding its bytes for a boundary that never comes would hold them all.
MAX_EVENT_BYTES = 8 * 1024 * 1024


class EventTooLarge(Exception):
    """An event grew past MAX_EVENT_BYTES without ending."""


class EventSplitter:
    """Cuts a byte stream into SSE events (each returned without its terminating blank line)."""

    __slots__ = ("_parts", "_size", "_after_cr")

    def __init__(self) -> None:
        # An unfinished event's reads, joined once it ends: joining at every read would copy a long event
        # once per read.
        self._parts: list[bytes] = []
        self._size = 0
        self._after_cr = False  # the last read ended in CR: a LF starting the next one completes it

    def feed(self, data: bytes) -> list[bytes]:
        if self._after_cr:
            self._after_cr = False
            if data.startswith(b"\n"):
                data = data[1:]
        # find, not `in`: on CPython 3.11 `in` on bytes costs a discarded TypeError each (see relay.py)
        if data.find(b"\r") >= 0:  # CRLF or CR line endings: rare, so normalise only when seen
            self._after_cr = data.endswith(b"\r")
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        parts = self._parts
        if parts:  # only the new bytes can hold the boundary (or its second half)
            if data.find(b"\n\n") < 0 and not (data.startswith(b"\n") and parts[-1].endswith(b"\n")):
                self._hold(data)
                return []
            data = b"".join(parts) + data
            parts.clear()
            self._size = 0
        if data.find(b"\n\n") < 0:
            self._hold(data)
            return []
        *events, rest = data.split(b"\n\n")
        if rest:
            self._hold(rest)
        return [e for e in events if e]

    def _hold(self, data: bytes) -> None:
        if data:
            self._parts.append(data)
            self._size += len(data)
            if self._size > MAX_EVENT_BYTES:
                raise EventTooLarge(f"an event of more than {MAX_EVENT_BYTES // (1024 * 1024)} MiB")

    def rest(self) -> bytes:
        """Whatever followed the last complete event (an event the upstream never terminated)."""
        rest = b"".join(self._parts)
        self._parts.clear()
        self._size = 0
        return rest.strip(b"\n")


def data_field(event: bytes) -> bytes | None:
    """The payload of an event's `data:` line(s), or None for comments and data-less events."""
    if event.find(b"\n") < 0:  # the common case: one line
        if not event.startswith(b"data:"):
            return None
        return event[6:] if event.startswith(b"data: ") else event[5:]
    parts = [line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(parts) if parts else None


_FIELDS = (b"data", b"event", b"id", b"retry")


def is_event(event: bytes) -> bool:
    """Whether every line of an event is an SSE field or a comment: bytes of anything else (a compressed
    body, an HTML page) are not a stream, whatever the content type said."""
    for line in event.split(b"\n"):
        if line and not line.startswith(b":") and line.partition(b":")[0] not in _FIELDS:
            return False
    return True


def event_name(event: bytes) -> bytes | None:
    """The event's `event:` field, when it has one (OpenAI's chat chunks never do)."""
    for line in event.split(b"\n"):
        if line.startswith(b"event:"):
            return line[6:].strip()
    return None


def data_event(payload: Any) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def error_event(body: dict[str, Any]) -> bytes:
    """A mid-stream failure as OpenAI sends it: one `data:` event holding `{"error": {...}}`."""
    return data_event(body)
