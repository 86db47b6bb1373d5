"""One request's way back to its client: the headers every answer carries, a stream's start (sent once,
whoever sends first: the relay, a heartbeat, a hedge that won, the cache), writes bounded by how long
the client may stall, and a failure told the way the client can still hear it."""

from __future__ import annotations

from collections.abc import Sequence

from firsttoken.alarms import Alarms
from firsttoken.errors import GatewayError
from firsttoken.journey.timeline import Timeline
from firsttoken.server.http import SSE_HEADERS, ClientStalled, Headers, Send, response_headers, send_bytes, send_error
from firsttoken.sse import DONE, error_event


class Reply:
    __slots__ = ("send", "base", "timeline", "alarms", "stall_s", "started", "ended")

    def __init__(self, send: Send, base: Headers, timeline: Timeline, alarms: Alarms, stall_s: float) -> None:
        self.send = send
        self.base = base  # the headers the request has gathered (x-request-id, x-firsttoken-size)
        self.timeline = timeline
        self.alarms = alarms
        self.stall_s = stall_s  # a client that reads nothing for this long is dropped
        self.started = False  # the response's status and headers went out
        self.ended = False  # and its last byte

    async def start_stream(self, extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
        """The 200 and a stream's headers, unless they went out already."""
        if self.started:
            return
        self.started = True
        self.timeline.status = 200
        await self.send({"type": "http.response.start", "status": 200,
                         "headers": [*SSE_HEADERS, *response_headers(self.base, self.timeline), *extra]})

    async def write(self, data: bytes, last: bool = False) -> None:
        """Bytes of the started response (`last`: they end it). A write waits only while the client does
        not read (the server's flow control); past `stall_s` the client is dropped."""
        if last:
            self.ended = True
        try:
            with self.alarms.deadline(self.alarms.now() + self.stall_s):
                await self.send({"type": "http.response.body", "body": data, "more_body": not last})
        except TimeoutError:
            raise ClientStalled(f"the client read nothing for {self.stall_s:g} s") from None

    async def whole(self, status: int, body: bytes, extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
        """A whole answer (JSON), headers and body at once."""
        self.timeline.status = status
        self.started = self.ended = True
        await send_bytes(self.send, status, body, [*response_headers(self.base, self.timeline), *extra])

    async def fail(self, failure: GatewayError) -> None:
        """A failure as the client can still hear it: an error response while nothing has gone out; after a
        stream's start, one error event and the stream's end."""
        self.timeline.failed(failure.code or failure.type, failure.message)
        if not self.started:
            self.timeline.status = failure.status
            self.started = self.ended = True
            await send_error(self.send, failure, response_headers(self.base, self.timeline))
            return
        await self.write(error_event(failure.body()) + self.timeline.closing_comment() + DONE, last=True)
