"""The relay: one pass over an upstream stream, each event forwarded to the client the moment it arrives.

It works on bytes: it finds event boundaries, notes the first token-bearing event (parsing JSON only
until then), drops the usage chunk the client did not ask for, and closes every stream with the
`: server-timing` comment and `data: [DONE]`. Until the first token it sends an SSE comment every
`heartbeat_s` (see alarms.py) so proxies and mobile networks keep an idle stream open.

Events that arrive in one read leave in one write: nothing waits to be merged, but a burst the
upstream sent together costs one send instead of one per event.

A stream ends truthfully: when the upstream closes it without `[DONE]`, or sends `[DONE]` without ever
giving a finish reason, the client gets an error event before the closing `[DONE]`, so that a cut answer
never looks whole. And the credentials sent upstream are removed from every event before anything
reads it (some upstreams quote the key in an error event).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Protocol

import aiohttp
import orjson

from firsttoken.alarms import Alarms, Heartbeat
from firsttoken.answers import is_token_bearing
from firsttoken.errors import GatewayError
from firsttoken.journey.timeline import Timeline
from firsttoken.redact import Redactor
from firsttoken.spend.usage import note_stream_usage
from firsttoken.sse import (
    BROKEN,
    DONE,
    EventSplitter,
    EventTooLarge,
    data_field,
    error_event,
    event_name,
    is_event,
)
from firsttoken.upstream.adapter import StreamTranslator

log = logging.getLogger("firsttoken.relay")

Write = Callable[[bytes, bool], Awaitable[None]]  # (data, last): the last write ends the response

# Reads holding one of these take the per-event path: the end, usage, errors (an object's "error" key, or a
# named SSE event). In a chunk's text a quote is escaped, so `"error"` there is always JSON, never words.
# Looked for with bytes.find, not `in`: on CPython 3.11 `x in some_bytes` first tries x as an integer and
# formats the TypeError it then discards, about 2 k instructions a test (callgrind), where find is a scan.
_SPECIAL_MARKERS = (b"[DONE]", b'"usage":{', b'"usage": {', b'"error"', b"event:")
_M_DONE, _M_USAGE, _M_USAGE_SPACED, _M_ERROR, _M_EVENT = _SPECIAL_MARKERS
_DONE = b"[DONE]"
_MAX_DONE = 128  # the longest [DONE] event taken as one (an id: line, a trailing space); chunks are longer
# A chunk with an empty delta (the finish chunk) carries no token, so it is not counted as one: the last
# token's time is the decode's end.
_EMPTY_DELTA, _EMPTY_DELTA_SPACED = b'"delta":{}', b'"delta": {}'
_TRANSLATOR_FAILED = b'data: {"error":'  # how a translator's failure begins (its _fail: an error chunk, [DONE])
# A finish reason given (not null, not empty): the answer ended, rather than being cut short.
_FINISHED = re.compile(rb'"finish_reason"\s*:\s*"[^"]')
SLICE = 512  # events handled between two turns of the event loop (Messages' translation: about 10 ms of them)
TOO_LARGE = "upstream_event_too_large"  # the code of one that sent an event past MAX_EVENT_BYTES

@dataclass(slots=True)
class RelayResult:
    clean: bool = False          # ended with [DONE] from the upstream after a finish reason, no error seen
    finished: bool = False       # a finish reason came
    error: str | None = None
    code: str | None = None      # the error event's code, when the relay wrote one
    refused: bool = False        # the upstream sent an error event of type invalid_request_error
    usage: dict[str, Any] | None = None


class Capture(Protocol):
    """Where the relay also puts every event it reads (for the cache, and for identical requests)."""

    def append(self, piece: bytes) -> None: ...
    def __iter__(self) -> Iterator[bytes]: ...
    def __len__(self) -> int: ...


class Sink(Protocol):
    """Where a relayed stream goes: its writes, the timeline its times go on, the capture of its events."""

    timeline: Timeline
    capture: Capture | None

    async def write(self, data: bytes, last: bool = False) -> None: ...


@dataclass(frozen=True, slots=True)
class Source:
    """The upstream a stream comes from, as the relay needs it."""

    name: str
    idle_s: float  # the longest wait for its next chunk once tokens flow
    translator: StreamTranslator | None = None  # its events into OpenAI's, when it speaks another format
    redactor: Redactor | None = None  # the credentials sent to it, removed from every read
    # Its events are in the client's own format: they go out as they came, and the translator only reads
    # them (for the first token, the finish, the usage, an error).
    native: bool = False


class Relay:
    """Moves one upstream response's events to the client."""

    def __init__(self, response: aiohttp.ClientResponse, sink: Sink, source: Source, *, alarms: Alarms,
                 heartbeat: Heartbeat, first_token_deadline: float, deadline_error: GatewayError | None = None,
                 strip_usage: bool, on_first_token: Callable[[], None] | None = None) -> None:
        self.response = response
        self.write: Write = sink.write
        self.timeline = sink.timeline
        self.translator = source.translator
        self.native = source.native
        self.strip_usage = strip_usage
        self.alarms = alarms
        self.heartbeat = heartbeat
        self.first_token_deadline = first_token_deadline
        # What to say when the first token's deadline passes, when that deadline is the client's own (and
        # so no fault of the upstream's); None: the upstream timed out.
        self.deadline_error = deadline_error
        self.on_first_token = on_first_token  # told once, as the first token arrives
        self.idle_s = source.idle_s
        self.upstream = source.name
        # The credentials sent upstream, removed from every read before it is looked at (an error event may
        # quote the key); None when there are none.
        self.redactor = source.redactor or None
        self.result = RelayResult()
        self.capture = sink.capture  # every event, usage too, for the cache: what a replay would send
        self._done = False
        self._out: list[bytes] = []  # events of the current read, written together at its end
        self._read_at = 0.0  # when the current read arrived: the time of the tokens it carries
        self._stamped = 0  # token events already timed
        self._voice = False  # a native stream's translated events are written: a failure with no event of its own

    async def run(self) -> RelayResult:
        splitter = EventSplitter()
        content = self.response.content
        loop = asyncio.get_running_loop()
        timeline = self.timeline
        try:
            # One deadline, on reads only (writes wait on the client, under its own): for the first
            # token at first, then for each next chunk.
            limit = self.alarms.deadline(self.first_token_deadline)
            while True:
                with limit:
                    data = await content.readany()
                if not data:
                    break
                self._read_at = perf_counter()
                done = await self._feed(splitter.feed(data))
                self._stamp_tokens()
                if done:
                    return self.result
                if timeline.first_token:
                    if self.heartbeat.active:
                        await self.heartbeat.stop()
                    limit.reschedule(loop.time() + self.idle_s)
            await self._end_of_stream(splitter)
        except TimeoutError:
            if not self.timeline.first_token and self.deadline_error is not None:
                error = self.deadline_error
                await self._fail(error.message, error.code or "timeout", error.type)
            else:
                waited = "the first token" if not self.timeline.first_token else "the next chunk"
                await self._fail(f"upstream {self.upstream} timed out waiting for {waited}", "upstream_timeout")
        except (aiohttp.ClientError, ConnectionError) as exc:
            await self._fail(f"upstream {self.upstream} broke the stream: {type(exc).__name__}", BROKEN)
        except EventTooLarge as exc:
            await self._fail(f"upstream {self.upstream} sent {exc}, which no client reads as an event; the stream "
                             f"was cut there", TOO_LARGE)
        return self.result

    async def _feed(self, events: list[bytes]) -> bool:
        """Handle one read's events in order and write what they produced; True once finished. A read of
        more than SLICE events (an upstream faster than the loop: one read held 7 000 of a 100 000-token
        answer) goes a slice at a time, letting the event loop run between: read and translated whole, it
        blocked every request of the worker for up to 290 ms (bench/soak.py, the loop's lag)."""
        for start in range(0, len(events), SLICE):
            if start:
                await asyncio.sleep(0)
            done = self._handle_all(events[start:start + SLICE])
            await self._flush()
            if done:
                return True
        return False

    def _handle_all(self, events: list[bytes]) -> bool:
        if not events:
            return False
        blob = b"\n\n".join(events)  # the read's whole events: one scan for a credential, one for the markers
        if self.redactor is not None:  # whole events, so that a key cut across two reads is found
            cleaned = self.redactor.bytes(blob)
            if cleaned is not blob:
                blob, events = cleaned, cleaned.split(b"\n\n")
        if self.translator is None and self.timeline.first_token:
            # The common read of a stream under way holds only content chunks: one scan of the
            # whole read tells, and the read goes out as it came, with no work per event.
            find = blob.find
            # Spelled out rather than all(...) over the markers: a generator per read cost a few percent of
            # a long stream's CPU (py-spy, 1 000 streams).
            if (find(_M_DONE) < 0 and find(_M_USAGE) < 0 and find(_M_USAGE_SPACED) < 0 and find(_M_ERROR) < 0
                    and find(_M_EVENT) < 0):
                self.timeline.token_events += (len(events) - blob.count(_EMPTY_DELTA)
                                               - blob.count(_EMPTY_DELTA_SPACED))
                if not self.result.finished and _FINISHED.search(blob):
                    self.result.finished = True
                self._out.append(blob)
                if self.capture is not None:
                    self.capture.append(blob)
                return False
        for event in events:
            if self.translator is None:
                if self._handle(event):
                    return True
                continue
            if self._translate(event, self.translator.feed(event)):
                return True
        return False

    def _translate(self, event: bytes | None, translated: list[bytes]) -> bool:
        """Handle what the translator made of one upstream event (None: of the stream's end). True when it
        ended the stream. A native stream's own events go out as they came, ahead of what reading them may
        add (the end); but one the translator could not read goes nowhere, and the failure it reports in its
        place is the client's to hear (the writer puts it in the client's format)."""
        failed = bool(translated) and translated[0].startswith(_TRANSLATOR_FAILED)
        unread = failed and (event is None or not _whole_event(event))
        if self.native and event is not None and not unread and event_name(event) is not None:
            self._out.append(event)
        self._voice = unread
        try:
            return any(self._handle(piece[:-2]) for piece in translated)  # each ends with its blank line
        finally:
            self._voice = False

    async def _flush(self) -> None:
        out = self._out
        if out:  # events are kept without their blank line: one join instead of a copy each
            data = out[0] + b"\n\n" if len(out) == 1 else b"\n\n".join(out) + b"\n\n"
            out.clear()
            await self.write(data, self._done)

    def _handle(self, event: bytes) -> bool:
        """One OpenAI-format event (without its blank line). True when it ended the stream."""
        timeline = self.timeline
        find = event.find
        if _is_done(event):
            self._end()
            return True
        if not self.result.finished and _FINISHED.search(event):
            self.result.finished = True
        if (not event.startswith(b"data:") or find(b"\n") >= 0) and find(b"event:") >= 0:  # a named event
            named = _as_chat_event(event)
            if named is None:
                return False
            event, find = named, named.find
        if not timeline.first_token:  # parsed until the first token: that much is cheap
            if self._read_before_first_token(event):
                return True
        elif find(b'"error"') >= 0:  # an error object, whichever key comes first
            chunk = _loads(data_field(event) or b"")
            if isinstance(chunk, dict) and chunk.get("error") is not None:
                self._note_error(chunk)
        if self.capture is not None:
            self.capture.append(event)
        # Every chunk carries "usage":null once usage is asked for; only the real one is parsed.
        at = event.find(b'"usage":')
        if at >= 0 and event[at + 8:at + 10].lstrip()[:1] == b"{":
            chunk = _loads(data_field(event) or b"")
            if isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict):
                self.result.usage = chunk["usage"]
                note_stream_usage(timeline, chunk["usage"])  # before the closing comment, which prices it
                if not chunk.get("choices"):  # the usage chunk: not a token event, and maybe not wanted
                    if not self.strip_usage and not self.native:
                        self._out.append(event)
                    return False
        if timeline.first_token and find(_EMPTY_DELTA) < 0 and find(_EMPTY_DELTA_SPACED) < 0:
            timeline.token_events += 1
        if not self.native or self._voice:  # a native stream's own event went out in its place
            self._out.append(event)
        return False

    def _end(self) -> None:
        """The upstream's [DONE]: the end, clean unless something went wrong or no finish reason came."""
        if self.result.error is None and not self.result.finished:  # [DONE], but the answer never ended
            self._broken(f"upstream {self.upstream} ended the stream without a finish reason; the answer may be "
                         f"cut short", BROKEN)
        self.result.clean = self.result.error is None
        self._close()

    def _read_before_first_token(self, event: bytes) -> bool:
        """Note an error or the first token in an event before the first token; True when the event is
        garbage (not JSON, not SSE at all), which no client could parse, so it ends the stream."""
        payload = data_field(event)
        chunk = _loads(payload) if payload is not None else None
        if not isinstance(chunk, dict) and (payload is not None or not is_event(event)):
            self._broken(f"upstream {self.upstream} sent something that is not a stream of JSON events "
                         f"({(payload or event)[:60].decode('utf-8', 'replace')!r}) before any token", BROKEN)
            self._close()
            return True
        if chunk is not None:
            if chunk.get("error") is not None:  # ("error": null in every chunk is no error)
                self._note_error(chunk)
            elif is_token_bearing(chunk):
                self.timeline.first_token = self._read_at
                if self.on_first_token is not None:
                    self.on_first_token()
        return False

    def _note_error(self, chunk: dict[str, Any]) -> None:
        error = chunk.get("error")
        message = str(error.get("message") if isinstance(error, dict) else error)
        self.result.error = self.redactor.text(message) if self.redactor is not None else message
        self.result.refused = isinstance(error, dict) and error.get("type") == "invalid_request_error"
        code = error.get("code") if isinstance(error, dict) else None
        self.timeline.failed(str(code or "upstream_error"), self.result.error)

    async def _end_of_stream(self, splitter: EventSplitter) -> None:
        """The upstream closed without `[DONE]`: flush what it owed; unless that ended the stream (a
        translator's last events), it was cut, and the client hears so before its stream is closed."""
        rest = splitter.rest()
        # An event the upstream never terminated is taken only when it is whole ([DONE], or data that parses):
        # SSE clients drop an unfinished one, and a cut one passed on would reach them as unparseable data.
        ended = bool(rest) and _whole_event(rest) and self._handle_all([rest])
        if not ended and self.translator is not None:
            ended = self._translate(None, self.translator.finish())
        if not ended and self.result.error is None:
            self._broken(f"upstream {self.upstream} closed the stream before it ended ([DONE] never came); the "
                         f"answer may be cut short", BROKEN)
        self._close()
        await self._flush()

    async def _fail(self, message: str, code: str, kind: str = "upstream_error") -> None:
        self._broken(message, code, kind)
        self._close()
        await self._flush()

    def _broken(self, message: str, code: str, kind: str = "upstream_error") -> None:
        """The stream cannot end well: the client gets one error event (before the closing [DONE])."""
        log.warning("%s", message)
        self.result.error = message
        self.result.code = code
        self.result.clean = False
        self.timeline.failed(code, message)
        if not self._done:
            self._out.append(error_event({"error": {"message": message, "type": kind,
                                                    "param": None, "code": code}})[:-2])

    def _stamp_tokens(self) -> None:
        """Tokens arrived with the last read: it is when they came (not when the client took them)."""
        if self.timeline.token_events != self._stamped:
            self._stamped = self.timeline.token_events
            self.timeline.tokens_at(self._read_at)

    def _close(self) -> None:
        if self._done:
            return
        self._done = True
        self._stamp_tokens()  # the closing comment's decode counts the read that ended the stream
        self._out += (self.timeline.closing_comment()[:-2], DONE[:-2])


def _is_done(event: bytes) -> bool:
    """The end, as the SDKs read it: data that begins [DONE] (an event this short: no chunk is)."""
    return len(event) <= _MAX_DONE and event.find(_DONE) >= 0 and (data_field(event) or b"").startswith(_DONE)


def _whole_event(event: bytes) -> bool:
    """Whether an event cut off by the stream's end is whole all the same: [DONE], or data that parses."""
    payload = data_field(event)
    return _is_done(event) or (payload is not None and _loads(payload) is not None)


def _as_chat_event(event: bytes) -> bytes | None:
    """A named SSE event as clients of chat completions can read it: `event: error` as OpenAI's error event,
    the default `message` as it is, any other name not at all (the SDKs would read its data as a chunk)."""
    name = event_name(event)
    if name == b"error":
        return _as_error_event(event)
    return event if name in (None, b"message") else None


def _as_error_event(event: bytes) -> bytes:
    """An `event: error` (a named SSE event, as some servers send) as OpenAI's in-stream error event."""
    payload = data_field(event) or b""
    body = _loads(payload)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
    else:
        text = body.get("message") if isinstance(body, dict) else None
        error = {"message": str(text or payload.decode("utf-8", "replace") or "the upstream sent an error event"),
                 "type": "upstream_error", "param": None,
                 "code": body.get("code") if isinstance(body, dict) else None}
    return error_event({"error": error})[:-2]


def _loads(payload: bytes) -> Any:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
