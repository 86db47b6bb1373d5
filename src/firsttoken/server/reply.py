"""One request's way back to its client: the headers every answer carries, a stream's start (sent once,
whoever sends first: the relay, a heartbeat, a hedge that won, the cache), heartbeats while a stream
waits for its first token, writes bounded by how long the client may stall, and a failure told the way
the client can still hear it.

A Reply is the client's outlet (server/outlet.py): an attempt's writes go straight through it."""

from __future__ import annotations

from collections.abc import Sequence

from firsttoken.alarms import Alarms, Deadline, Heartbeat
from firsttoken.config import Streaming
from firsttoken.errors import GatewayError
from firsttoken.formats.chat import CHAT
from firsttoken.formats.client import Answering
from firsttoken.journey.timeline import Timeline
from firsttoken.relay import Capture, Relay
from firsttoken.server.http import SSE_HEADERS, ClientStalled, Headers, Send, response_headers, send_bytes, send_error
from firsttoken.sse import DONE, HEARTBEAT, error_event


class Reply:
    __slots__ = ("send", "base", "timeline", "alarms", "streaming", "include_usage", "answering", "writer",
                 "capture", "heartbeat", "started", "ended", "_stall")
    lost = False  # an outlet's: only a hedge lane can lose its race

    def __init__(self, send: Send, base: Headers, timeline: Timeline, alarms: Alarms, streaming: Streaming,
                 include_usage: bool = False, answering: Answering = CHAT) -> None:
        self.send = send
        self.base = base  # the headers the request has gathered (x-request-id, x-firsttoken-size)
        self.timeline = timeline
        self.alarms = alarms
        self.streaming = streaming  # the heartbeat's interval; how long the client may stall
        self.include_usage = include_usage  # a stream's client asked for the usage chunk
        # The client's wire format: what is written in chat's form (events, whole answers, errors) goes out
        # in it. A writer of None: chat's own, written as it is.
        self.answering = answering
        self.writer = answering.writer()
        self.capture: Capture | None = None  # where the answer's events also go (to the requests that joined it)
        self.heartbeat: Heartbeat | None = None
        self.started = False  # the response's status and headers went out
        self.ended = False  # and its last byte
        self._stall: Deadline | None = None  # made once, moved for each write: a long stream makes thousands

    # --- the outlet -----------------------------------------------------------------------------

    @property
    def won(self) -> bool:
        return True  # what reaches the client's own outlet is the answer

    async def claim(self) -> bool:
        return True

    async def begin(self, headers: Headers, relay: Relay | None = None) -> None:
        """An upstream stream begins: its passed-through headers go out with the start."""
        await self.start_stream(headers)

    # --- the response ---------------------------------------------------------------------------

    def keep_alive(self) -> Heartbeat:
        """Heartbeats (SSE comments) until the first token, or the end: proxies and mobile networks keep
        an idle stream open."""
        self.heartbeat = self.alarms.heartbeat(self.streaming.heartbeat_s, self._beat)
        self.heartbeat.start()
        return self.heartbeat

    async def _beat(self) -> None:
        await self.start_stream()
        await self.write(HEARTBEAT)

    async def quiet(self) -> None:
        """No more heartbeats; one being written finishes first, so writes never interleave."""
        if self.heartbeat is not None:
            await self.heartbeat.stop()

    async def start_stream(self, extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
        """The 200 and a stream's headers, unless they went out already."""
        if self.started:
            return
        self.started = True
        self.timeline.status = 200
        await self.send({"type": "http.response.start", "status": 200,
                         "headers": [*SSE_HEADERS, *response_headers(self.base, self.timeline), *extra]})

    async def write(self, data: bytes, last: bool = False) -> None:
        """Bytes of the started response (`last`: they end it, and no heartbeat may follow them). A write
        waits only while the client does not read (the server's flow control); past `client_stall_s` the
        client is dropped."""
        if last:
            self.ended = True
            if self.heartbeat is not None and self.heartbeat.active:
                await self.heartbeat.stop()
        if self.writer is not None:
            data = self.writer.write(data)
            if not data and not last:
                return
        stall = self._stall
        if stall is None:
            stall = self._stall = self.alarms.deadline(0.0)
        stall.reschedule(self.alarms.now() + self.streaming.client_stall_s)
        try:
            with stall:
                await self.send({"type": "http.response.body", "body": data, "more_body": not last})
        except TimeoutError:
            raise ClientStalled(f"the client read nothing for {self.streaming.client_stall_s:g} s") from None

    async def whole(self, status: int, body: bytes, extra: Sequence[tuple[bytes, bytes]] = (),
                    native: bytes | None = None) -> None:
        """A whole answer, headers and body at once: `body` a chat.completion, given in the client's format;
        or `native`, the upstream's answer already in it."""
        timeline = self.timeline
        headers = [*response_headers(self.base, timeline), *extra]
        if status < 300:
            body = self.answering.whole(body, native)
            if timeline.pricing is not None:  # what a stream says in its closing comment
                headers.append((b"x-firsttoken-cost", timeline.costed().header()))
        timeline.status = status
        self.started = self.ended = True
        await send_bytes(self.send, status, body, headers)

    async def fail(self, failure: GatewayError) -> None:
        """A failure as the client can still hear it: an error response while nothing has gone out; after a
        stream's start, one error event and the stream's end."""
        await self.quiet()  # first: a beat in flight may still start the stream
        self.timeline.failed(failure.code or failure.type, failure.message)
        if not self.started:
            self.timeline.status = failure.status
            self.started = self.ended = True
            await send_error(self.send, failure, response_headers(self.base, self.timeline),
                             self.answering.error_body)
            return
        await self.write(error_event(failure.body()) + self.timeline.closing_comment() + DONE, last=True)

    def close(self) -> None:
        """The request is over (or abandoned): no beat may follow. The heartbeat calls back into this reply,
        a cycle: let go of here, the reply and the answer it captured are freed the moment the request ends,
        rather than at the next full collection, which may be minutes and hundreds of megabytes away."""
        if self.heartbeat is not None:
            self.heartbeat.close()
            self.heartbeat = None
