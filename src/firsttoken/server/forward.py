"""Forwarding a request to its targets: the non-streaming answer, and the stream with its relay.

Targets are tried in the router's order while nothing has reached the client yet: a connection
failure, a timeout, 429 or a 5xx moves on to the next target, while the retry budget lasts; any
other 4xx is the client's to see. Each attempt's outcome goes back to the router: its time to first
token, or the failure that counts against the target's health, or the 429 that cools it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import aiohttp
import orjson

from firsttoken.alarms import Alarms
from firsttoken.cache.replay import completion_chunks
from firsttoken.errors import CLIENT_GAVE_UP, GatewayError, bad_gateway, gateway_timeout
from firsttoken.journey.tcp_info import RttReader
from firsttoken.journey.timeline import Timeline
from firsttoken.relay import Capture, Relay
from firsttoken.routing.router import Router
from firsttoken.routing.targets import Target
from firsttoken.server.hedge import Lane, Race, race_whole
from firsttoken.server.http import ClientStalled, Headers
from firsttoken.server.reply import Reply
from firsttoken.sse import DONE, HEARTBEAT
from firsttoken.upstream.adapter import UpstreamRequest
from firsttoken.upstream.connector import protocol_of
from firsttoken.upstream.registry import UpstreamLink, Upstreams

log = logging.getLogger("firsttoken.forward")

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
# Failures to get or read a response (the connection, or a response that is not HTTP): the next target
# may well succeed. aiohttp.ClientError covers its connection, payload and malformed-response errors.
CONNECTION_ERRORS = (aiohttp.ClientError, ConnectionError, OSError)
_PASSED_HEADERS = (b"retry-after", b"x-ratelimit-")

BuildRequest = Callable[[UpstreamLink, Target], UpstreamRequest]
# A whole answer's body in OpenAI's shape; a GatewayError (502) when the upstream's 200 is not an answer.
Translate = Callable[[UpstreamLink, bytes], bytes]
# A clean answer for the edge cache: (kind "json" | "sse", the answer in OpenAI's format, upstream headers).
Keep = Callable[[str, bytes, Any], None]


def passthrough_headers(link: UpstreamLink, response: aiohttp.ClientResponse) -> Headers:
    """Rate-limit headers clients act on (Retry-After, x-ratelimit-*) pass through to them (without any
    credential the upstream might have put in one)."""
    out: Headers = []
    for name, value in response.raw_headers:
        lower = name.lower()
        if lower.startswith(_PASSED_HEADERS):
            out.append((lower, link.adapter.scrub(value)))
    return out


def _connection_error(link: UpstreamLink, exc: BaseException) -> GatewayError:
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return gateway_timeout(f"upstream {link.name} did not answer within {link.settings.timeouts.connect:g} s "
                               f"of connecting; check that it is up, or raise its timeouts.")
    if isinstance(exc, aiohttp.ClientResponseError):
        detail = exc.message.splitlines()[0] if exc.message else exc.status
        return bad_gateway(link.adapter.redactor.text(f"upstream {link.name} ({link.settings.public_url}) sent a "
                                                      f"response that is not valid HTTP: {detail}"),
                           code="upstream_bad_response")
    return bad_gateway(link.adapter.redactor.text(f"upstream {link.name} ({link.settings.public_url}) is unreachable: "
                                                  f"{type(exc).__name__}{': ' + str(exc) if str(exc) else ''}"))


UPSTREAM_RTT = RttReader()  # the upstream connections of this process


def _timeout(link: UpstreamLink, which: str = "first_byte") -> GatewayError:
    """A 504 naming the timeout that ran out: `first_byte` (no answer), `idle` (a body that stalled) or
    `total` (a whole answer that took too long, however steadily it came)."""
    seconds = getattr(link.settings.timeouts, which)
    if which == "total":
        return gateway_timeout(f"upstream {link.name}'s answer did not finish within {seconds:g} s (timeouts.total); "
                               f"stream long answers, or raise the timeout.")
    return gateway_timeout(f"upstream {link.name} sent nothing for {seconds:g} s (timeouts.{which}); it may be "
                           f"overloaded, or the timeout may be too short.")


async def _open(link: UpstreamLink, request: UpstreamRequest, timeline: Timeline) -> aiohttp.ClientResponse:
    """Send the request and wait for the response headers; once more if a pooled connection was closed
    under us (the upstream's keep-alive timer and our reuse can cross: it never saw the request). A new
    connection that drops is a failure like any other: the upstream may have seen the request and
    started on it, so sending it again is the router's call, within its retry budget."""
    session, connector = link.pool.session, link.pool.connector
    assert session is not None and connector is not None
    opened = connector.connections_opened
    try:
        # No redirects: aiohttp would carry api-key / x-api-key headers to wherever they point.
        response = await session.post(request.url, data=request.data, headers=request.headers,
                                      allow_redirects=False)
    except aiohttp.ServerDisconnectedError:
        # Any connection opened meanwhile (by this request or, rarely, another) counts as ours: when in
        # doubt, do not send again.
        if connector.connections_opened != opened:
            raise
        response = await session.post(request.url, data=request.data, headers=request.headers,
                                      allow_redirects=False)
    timeline.first_byte = perf_counter()
    timeline.opened(connector.handshake(response))
    timeline.upstream_rtt = UPSTREAM_RTT.rtt(getattr(protocol_of(response), "transport", None),
                                             timeline.first_byte, fresh=not timeline.reused)
    timeline.upstream_timing = response.headers.get("Server-Timing")
    return response


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


# The request's deadline, set by the server for the request's task (and so for its hedges' tasks): every
# attempt waits no longer, and none starts after it.
CLIENT_DEADLINE: ContextVar[ClientDeadline | None] = ContextVar("client_deadline", default=None)


def _clients(deadline: float) -> GatewayError | None:
    """The client's deadline error when `deadline` is the client's own (else the upstream's timeout ran)."""
    client = CLIENT_DEADLINE.get()
    return client.passed() if client is not None and deadline == client.at else None


@dataclass(slots=True)
class Attempt:
    """One target tried: its link, and the response headers or why there are none."""
    link: UpstreamLink
    sent: float  # on the alarms' clock
    deadline: float  # for the response headers
    response: aiohttp.ClientResponse | None = None
    failure: GatewayError | None = None


async def _attempt(upstreams: Upstreams, alarms: Alarms, target: Target, build: BuildRequest,
                   timeline: Timeline) -> Attempt:
    """Send the request to one target and wait, within its first-byte deadline, for the headers."""
    link = upstreams[target.upstream]
    request = build(link, target)
    timeline.route = target.label
    timeline.upstream = link.name
    timeline.floor_ms = link.floor_ms
    timeline.attempts += 1
    timeline.sent = perf_counter()
    now = alarms.now()
    attempt = Attempt(link, now, now + link.settings.timeouts.first_byte)
    client = CLIENT_DEADLINE.get()
    if client is not None and client.at < attempt.deadline:
        if client.at <= alarms.now():
            attempt.failure = client.passed()
            return attempt
        attempt.deadline = client.at
    try:
        with alarms.deadline(attempt.deadline):
            attempt.response = await _open(link, request, timeline)
    except aiohttp.ServerTimeoutError as exc:  # a TimeoutError too, but the connect's own
        attempt.failure = _connection_error(link, exc)
    except TimeoutError:
        attempt.failure = _clients(attempt.deadline) or _timeout(link)
    except CONNECTION_ERRORS as exc:
        attempt.failure = _connection_error(link, exc)
    return attempt


def _refusal(link: UpstreamLink, response: aiohttp.ClientResponse, data: bytes) -> GatewayError:
    """An upstream's error status (or a redirect) as the client's error, its rate-limit headers kept."""
    if response.status < 400:
        return bad_gateway(f"upstream {link.name} answered with a redirect (HTTP {response.status}); set its url "
                           f"to the address it redirects to.", code="upstream_redirect")
    error = link.adapter.error(response.status, data)
    error.headers.update({k.decode("latin-1"): v.decode("latin-1") for k, v in passthrough_headers(link, response)})
    return error


def _retryable(failure: GatewayError) -> bool:
    return failure.status in RETRYABLE_STATUS and failure.code != CLIENT_GAVE_UP


def _judge(router: Router, target: Target, stream: bool, timeline: Timeline, failure: GatewayError | None,
           ended: str = "clean") -> None:
    """What one attempt tells the router about its target: `failure`, or for a stream that was relayed
    how it ended (StreamForwarder.ended_as)."""
    if failure is None:
        if ended == "clean":
            first = (timeline.first_token or timeline.first_byte) if stream else timeline.first_byte
            router.succeeded(target, stream, (first - timeline.sent) * 1000.0 if first and timeline.sent else None)
        elif ended == "broken":
            router.failed(target)
        else:  # the client's deadline passed, or the upstream refused the request in-stream
            router.settled(target)
    elif failure.code == CLIENT_GAVE_UP:
        router.settled(target)  # the client's own deadline says nothing of the target
    elif failure.status == 429:
        router.rate_limited(target, failure.headers.get("retry-after"))
    elif failure.status in RETRYABLE_STATUS:
        router.failed(target)
    else:
        router.settled(target)


@dataclass(slots=True)
class Fetched:
    """A whole answer read from a target, not yet sent."""
    link: UpstreamLink
    response: aiohttp.ClientResponse
    data: bytes  # in OpenAI's shape


async def forward_complete(upstreams: Upstreams, alarms: Alarms, router: Router, targets: list[Target],
                           build: BuildRequest, translate: Translate, reply: Reply, keep: Keep | None = None) -> None:
    """A non-streaming request: the first target that answers well is the answer; one that is late is
    raced by the next (hedged), and the first whole answer wins. A 200 that `translate` finds is no
    answer (a page, a body cut short) is the target's failure, and the next target may try."""
    timeline = reply.timeline

    async def fetch(target: Target, record: Timeline, lost: set[Target]) -> Fetched | GatewayError:
        router.started(target)
        try:
            outcome = await _fetch(upstreams, alarms, target, build, translate, record)
        except BaseException:
            if target not in lost:
                router.settled(target)
            raise
        _judge(router, target, False, record, outcome if isinstance(outcome, GatewayError) else None)
        return outcome

    failure: GatewayError | None = None
    waiting = list(targets)
    while waiting:
        if failure is not None and not router.may_retry():
            break
        target = waiting.pop(0)
        delay = router.hedge_delay(target, stream=False) if waiting else None
        outcome = await (fetch(target, timeline, set()) if delay is None else
                         race_whole(router, fetch, target, waiting, delay, timeline))
        if isinstance(outcome, Fetched):
            await _deliver(outcome, reply, keep)
            return
        failure = outcome
        if not _retryable(failure):
            break
    assert failure is not None
    log.warning("request failed after %d attempt(s): %s", timeline.attempts, failure.message)
    await reply.fail(failure)


async def _fetch(upstreams: Upstreams, alarms: Alarms, target: Target, build: BuildRequest, translate: Translate,
                 timeline: Timeline) -> Fetched | GatewayError:
    """One target's whole answer, read and translated into OpenAI's shape; else why not."""
    attempt = await _attempt(upstreams, alarms, target, build, timeline)
    link, response = attempt.link, attempt.response
    if response is None:
        assert attempt.failure is not None
        return attempt.failure
    try:
        data = await _read_body(alarms, link, response, attempt.sent)
    except GatewayError as error:
        response.close()
        return error
    except CONNECTION_ERRORS as exc:
        response.close()
        return _connection_error(link, exc)
    except BaseException:  # cancelled (it lost a race, or the client left): the provider stops generating
        response.close()
        raise
    response.release()
    if response.status >= 300:
        return _refusal(link, response, data)
    try:  # an answer may quote the key too (an upstream echoing its request, a debugging proxy)
        return Fetched(link, response, translate(link, link.adapter.scrub(data)))
    except GatewayError as error:  # a 200 that is not an answer
        return error


async def _read_body(alarms: Alarms, link: UpstreamLink, response: aiohttp.ClientResponse, sent: float) -> bytes:
    """A whole body, read as it comes: each chunk within the upstream's idle timeout of the last, the whole
    within its total timeout of `sent` and within the client's deadline; a GatewayError (a 504 naming which
    ran out) when one passes."""
    timeouts = link.settings.timeouts
    client = CLIENT_DEADLINE.get()
    end, last = sent + timeouts.total, "total"
    if client is not None and client.at < end:
        end, last = client.at, "client"
    parts: list[bytes] = []
    idle = alarms.now() + timeouts.idle
    limit = alarms.deadline(min(idle, end))
    try:
        with limit:
            while chunk := await response.content.readany():
                parts.append(chunk)
                idle = alarms.now() + timeouts.idle
                limit.reschedule(min(idle, end))
    except TimeoutError:
        which = "idle" if idle < end else last
        if which == "client":
            assert client is not None
            raise client.passed() from None
        raise _timeout(link, which) from None
    return b"".join(parts)


async def _deliver(fetched: Fetched, reply: Reply, keep: Keep | None) -> None:
    response, answer, timeline = fetched.response, fetched.data, reply.timeline
    note_usage(timeline, answer)
    await reply.whole(response.status, answer, passthrough_headers(fetched.link, response))
    timeline.last_byte = perf_counter()
    if keep is not None and response.status == 200:
        keep("json", answer, response.headers)


class StreamForwarder:
    """A streaming request: SSE headers go out as soon as the first target answers (or the first
    heartbeat is due), then the relay moves its events."""

    def __init__(self, upstreams: Upstreams, alarms: Alarms, router: Router, targets: list[Target],
                 build: BuildRequest, reply: Reply, *, client_wants_usage: bool, heartbeat_s: float,
                 keep: Keep | None = None, capture: Capture | None = None) -> None:
        self.upstreams = upstreams
        self.router = router
        # How the last relayed stream ended, for the router: clean, broken (a failure of its target), or
        # neither (the client's deadline passed, or the upstream refused the request in-stream).
        self.ended_as = "clean"
        self.keep = keep
        self.capture = capture
        self.alarms = alarms
        self.targets = targets
        self.build = build
        self.reply = reply
        self.timeline = reply.timeline
        self.client_wants_usage = client_wants_usage
        self.heartbeat = alarms.heartbeat(heartbeat_s, self._heartbeat)

    async def run(self) -> None:
        self.heartbeat.start()
        try:
            try:
                failure = await self._try_targets()
            except GatewayError as error:  # e.g. a request the next target's wire format cannot carry
                failure = error
            if failure is not None:
                log.warning("stream failed after %d attempt(s): %s", self.timeline.attempts, failure.message)
                await self.heartbeat.stop()
                await self.reply.fail(failure)
        except (GatewayError, ClientStalled, asyncio.CancelledError):
            raise
        except Exception:  # a bug: once the stream has started, end it properly instead of a second start
            if not self.reply.started or self.reply.ended:
                raise
            log.exception("stream failed unexpectedly")
            await self.heartbeat.stop()
            await self.reply.fail(GatewayError(500, "The gateway failed unexpectedly; this is a bug in firsttoken, "
                                               "and the log has the details.", "server_error", code="internal_error"))
        finally:
            self.heartbeat.close()

    async def _try_targets(self) -> GatewayError | None:
        failure: GatewayError | None = None
        waiting = list(self.targets)
        while waiting:
            if failure is not None and not self.router.may_retry():
                break
            target = waiting.pop(0)
            delay = self.router.hedge_delay(target) if waiting else None
            failure = await (self._stream(target) if delay is None else self._race(target, waiting, delay))
            if failure is None or not _retryable(failure):
                return failure
        return failure

    def _lane(self, lane: Lane) -> Awaitable[GatewayError | None]:
        return self._stream(lane.target, lane)

    async def _race(self, first: Target, waiting: list[Target], delay: float) -> GatewayError | None:
        """`first`, raced by the next target when its first token is later than `delay` (server/hedge.py)."""
        race = Race(self)
        try:
            lane = race.start(first, self.timeline, self._lane)
            assert lane.task is not None
            await asyncio.wait({lane.task}, timeout=delay)
            if (not lane.task.done() and race.winner is None and self.router.ready(waiting[0])
                    and self.router.may_hedge()):
                race.start(waiting.pop(0), self.timeline.for_hedge(), self._lane)
            return await race.finish()
        finally:
            await race.abandon()  # the client left (or a bug): no lane may run on without it

    async def _stream(self, target: Target, lane: Lane | None = None) -> GatewayError | None:
        """One target's stream relayed to the client (through its lane's race, when hedged); else why not.
        What happened goes to the router; a lane that lost its race was told to it already."""
        timeline = self.timeline if lane is None else lane.timeline
        self.router.started(target)
        if lane is not None:
            lane.started = True
        try:
            failure = await self._attempt_stream(target, timeline, lane)
        except BaseException:
            if lane is None or not lane.lost:
                self.router.settled(target)
            raise
        won = lane is None or lane.race.winner is lane
        _judge(self.router, target, True, self.timeline if won else timeline, failure,
               self.ended_as if won else "clean")
        return failure

    async def _attempt_stream(self, target: Target, timeline: Timeline, lane: Lane | None) -> GatewayError | None:
        attempt = await _attempt(self.upstreams, self.alarms, target, self.build, timeline)
        link, response = attempt.link, attempt.response
        if response is None:
            return attempt.failure
        try:
            return await self._answer(target, attempt, response, lane)
        except CONNECTION_ERRORS as exc:
            return _connection_error(link, exc)
        finally:
            if not link.pool.releasing(response):
                response.close()  # aborts a stream cut short, so the upstream stops generating

    async def _answer(self, target: Target, attempt: Attempt, response: aiohttp.ClientResponse,
                      lane: Lane | None = None) -> GatewayError | None:
        """Relay one upstream response; a GatewayError when it refused (nothing relayed yet). A lane's
        relay writes through its race until the race is decided."""
        link, deadline = attempt.link, attempt.deadline
        if not (200 <= response.status < 300 and response.content_type.startswith("text/event-stream")):
            try:  # a refusal, or (some servers) a stream request answered with one JSON body
                data = await _read_body(self.alarms, link, response, attempt.sent)
            except GatewayError as error:  # a stream's own failures end in the relay
                return error
            if response.status >= 300:
                return _refusal(link, response, data)
            return await self._whole_as_stream(link, response, data, lane)
        if lane is None:
            await self.start(passthrough_headers(link, response))
        else:
            lane.headers = passthrough_headers(link, response)
        gave_up = _clients(deadline)
        relay = Relay(response, self.write if lane is None else lane.write, self.timeline if lane is None else
                      lane.timeline, translator=link.adapter.stream_translator(True),  # usage for us; stripped
                      strip_usage=not self.client_wants_usage, alarms=self.alarms, heartbeat=self.heartbeat,
                      first_token_deadline=deadline, idle_s=link.settings.timeouts.idle, upstream=link.name,
                      redactor=link.adapter.redactor, capture=self.capture if lane is None else lane.capture,
                      deadline_error=gave_up, on_first_token=lambda: self.router.first_token(target))
        if lane is not None:
            lane.relay = relay
        result = await relay.run()
        if lane is not None and lane.race.winner is not lane:
            if gave_up is not None and result.code == CLIENT_GAVE_UP:
                return gave_up
            return bad_gateway(f"upstream {link.name}: {result.error or 'the stream ended without a token'}",
                               code="upstream_stream_broken")
        # Neither the client's deadline passing nor the upstream refusing the request in-stream is a fault
        # of the target's (see _judge).
        self.ended_as = ("clean" if result.clean else
                         "neither" if result.code == CLIENT_GAVE_UP or result.refused else "broken")
        usage = result.usage or {}
        output, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
        self.timeline.output_tokens = output if isinstance(output, int) else None
        self.timeline.input_tokens = prompt if isinstance(prompt, int) else None
        if not self.reply.ended:
            await self.write(b"", last=True)
        if result.clean:
            link.pool.release_later(response)
            if self.keep is not None and relay.capture:  # keep comes with a capture to keep from
                self.keep("sse", b"\n\n".join(relay.capture) + b"\n\n", response.headers)
        return None

    async def _whole_as_stream(self, link: UpstreamLink, response: aiohttp.ClientResponse, data: bytes,
                               lane: Lane | None) -> GatewayError | None:
        """A stream request answered with one whole body (some servers do): a chat completion goes out as the
        chunks a stream of it would have carried; anything else (a page, an error) is the target's failure,
        a 502 while nothing has reached the client, and the next target may try."""
        try:
            answer = link.adapter.chat_response(link.adapter.scrub(data))
        except GatewayError as error:
            return error
        headers = passthrough_headers(link, response)
        if lane is not None:
            lane.headers = headers
            if not await lane.claim():
                return None
        await self.heartbeat.stop()  # first: a beat in flight may still start the stream
        await self.start(headers)
        timeline = self.timeline
        timeline.first_token = timeline.last_token = perf_counter()
        note_usage(timeline, answer)
        events = completion_chunks(orjson.loads(answer), self.client_wants_usage)
        await self.write(events + timeline.closing_comment() + DONE, last=True)
        if self.keep is not None:
            self.keep("json", answer, response.headers)
        return None

    async def write(self, data: bytes, last: bool = False) -> None:
        if last:  # the response ends with these bytes: no heartbeat may follow them
            await self.heartbeat.stop()
        await self.reply.write(data, last)

    async def start(self, extra: Headers) -> None:
        await self.reply.start_stream(extra)

    async def _heartbeat(self) -> None:
        await self.reply.start_stream()
        await self.reply.write(HEARTBEAT)


_COMPLETION_TOKENS = b'"completion_tokens":'
_PROMPT_TOKENS = b'"prompt_tokens":'
_NUMBER = re.compile(rb"\s*(\d{1,12})")


def note_usage(timeline: Timeline, answer: bytes) -> None:
    """The upstream's usage counts of a whole answer (OpenAI's shape), onto the request's timeline."""
    timeline.output_tokens = usage_count(answer, _COMPLETION_TOKENS)
    timeline.input_tokens = usage_count(answer, _PROMPT_TOKENS)


def usage_count(answer: bytes, field: bytes) -> int | None:
    """A usage count in an OpenAI-format answer, found without parsing it all (it can be large)."""
    at = answer.rfind(field)
    if at < 0:
        return None
    number = _NUMBER.match(answer, at + len(field))
    return int(number.group(1)) if number else None


def client_wants_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True
