"""Answering from the edge cache: a stored answer, in the shape the client asked for, at once; or the
answer of an identical request still in flight, as it comes."""

from __future__ import annotations

from time import perf_counter

from firsttoken.alarms import Alarms
from firsttoken.cache.entry import Entry
from firsttoken.cache.flight import Flight
from firsttoken.cache.replay import ReplayError, is_usage_chunk, replay
from firsttoken.errors import bad_gateway
from firsttoken.journey.timeline import Timeline
from firsttoken.server.http import SSE_HEADERS, ClientStalled, Headers, Send, response_headers, send_bytes
from firsttoken.sse import DONE, error_event

JOINED = b"hit; joined"  # x-firsttoken-cache of a request that took an identical one's answer in flight


async def send_cached(send: Send, base_headers: Headers, timeline: Timeline, answer: bytes, route: str,
                      stream: bool, header: bytes = b"hit") -> None:
    """A stored answer, already in the shape asked for (cache.replay): a stream's events or a whole answer."""
    timeline.cache, timeline.route, timeline.status = header, route, 200
    if stream:
        timeline.first_byte = timeline.first_token = perf_counter()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [*SSE_HEADERS, *response_headers(base_headers, timeline)]})
        # One write: the whole answer, its closing comment and [DONE] in one segment on the wire.
        await send({"type": "http.response.body", "body": answer + timeline.closing_comment() + DONE})
    else:
        await send_bytes(send, 200, answer, response_headers(base_headers, timeline))
    timeline.last_byte = perf_counter()


async def send_followed(send: Send, base_headers: Headers, timeline: Timeline, flight: Flight, stream: bool,
                        include_usage: bool, alarms: Alarms, client_stall_s: float) -> bool:
    """The answer of the identical request in flight, as it comes. False when that one failed before this
    one had sent anything (or its answer was not one to share): it should then go upstream itself."""
    timeline.cache = JOINED
    if not stream:
        await flight.finished()
        answer = _replayed(flight, False, include_usage)
        if answer is None:
            return False
        timeline.route, timeline.status = flight.route, 200
        await send_bytes(send, 200, answer, response_headers(base_headers, timeline))
        timeline.last_byte = perf_counter()
        return True

    started = False

    async def write(data: bytes, more: bool = True) -> None:
        nonlocal started
        if not started:
            started = True
            timeline.route, timeline.status = flight.route, 200
            timeline.first_byte = timeline.first_token = perf_counter()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [*SSE_HEADERS, *response_headers(base_headers, timeline)]})
        try:  # a follower that reads nothing is dropped; the flight does not wait for it
            with alarms.deadline(alarms.now() + client_stall_s):
                await send({"type": "http.response.body", "body": data, "more_body": more})
        except TimeoutError:
            raise ClientStalled(f"the client read nothing for {client_stall_s:g} s") from None

    async for piece in flight.follow():
        if include_usage or not is_usage_chunk(piece):
            await write(piece + b"\n\n")
    if started and flight.ended_well and flight.body is None:  # an answer not to keep, followed whole
        await write(timeline.closing_comment() + DONE, more=False)
    elif flight.kind is None or flight.body is None:  # the leader failed (or has nothing to share)
        if not started:
            return False
        failure = bad_gateway("the identical request this one joined failed mid-stream",
                              code="upstream_stream_broken")
        await write(error_event(failure.body()) + timeline.closing_comment() + DONE, more=False)
    elif not started:  # the leader's answer came whole (a server that answers streams with JSON)
        answer = _replayed(flight, True, include_usage)
        if answer is None:
            return False
        await write(answer + timeline.closing_comment() + DONE, more=False)
    else:
        await write(timeline.closing_comment() + DONE, more=False)
    timeline.last_byte = perf_counter()
    return True


def _replayed(flight: Flight, stream: bool, include_usage: bool) -> bytes | None:
    """The leader's whole answer in the shape this request asked for; None when it had none to share."""
    if flight.kind is None or flight.body is None:
        return None
    try:
        return replay(Entry(flight.kind, flight.body, "", flight.route, 0, 0), stream, include_usage)
    except ReplayError:  # it was checked before being shared: a bug, but one a request need not see
        return None
