"""Answering from the edge cache: a stored answer, in the shape the client asked for, at once; or the
answer of an identical request still in flight, as it comes."""

from __future__ import annotations

from time import perf_counter

from firsttoken.alarms import Alarms
from firsttoken.cache.entry import Entry
from firsttoken.cache.flight import Flight
from firsttoken.cache.replay import as_completion, as_stream, is_usage_chunk
from firsttoken.errors import bad_gateway
from firsttoken.journey.timeline import Timeline
from firsttoken.server.http import SSE_HEADERS, ClientStalled, Headers, Send, response_headers, send_bytes
from firsttoken.sse import DONE, error_event

JOINED = b"hit; joined"  # x-firsttoken-cache of a request that took an identical one's answer in flight


async def send_cached(send: Send, base_headers: Headers, timeline: Timeline, entry: Entry, stream: bool,
                      include_usage: bool, header: bytes = b"hit") -> None:
    timeline.cache, timeline.route, timeline.status = header, entry.model, 200
    if stream:
        events = as_stream(entry, include_usage)
        timeline.first_byte = timeline.first_token = perf_counter()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [*SSE_HEADERS, *response_headers(base_headers, timeline)]})
        # One write: the whole answer, its closing comment and [DONE] in one segment on the wire.
        await send({"type": "http.response.body", "body": events + timeline.closing_comment() + DONE})
    else:
        await send_bytes(send, 200, as_completion(entry), response_headers(base_headers, timeline))
    timeline.last_byte = perf_counter()


async def send_followed(send: Send, base_headers: Headers, timeline: Timeline, flight: Flight, stream: bool,
                        include_usage: bool, alarms: Alarms, client_stall_s: float) -> bool:
    """The answer of the identical request in flight, as it comes. False when that one failed before this
    one had sent anything: it should then go upstream itself."""
    timeline.cache = JOINED
    if not stream:
        await flight.finished()
        if flight.kind is None or flight.body is None:
            return False
        timeline.route, timeline.status = flight.route, 200
        await send_bytes(send, 200, as_completion(Entry(flight.kind, flight.body, "", flight.route, 0, 0)),
                         response_headers(base_headers, timeline))
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
    if flight.kind is None or flight.body is None:  # the leader failed
        if not started:
            return False
        failure = bad_gateway("the identical request this one joined failed mid-stream",
                              code="upstream_stream_broken")
        await write(error_event(failure.body()) + timeline.closing_comment() + DONE, more=False)
    elif not started:  # the leader's answer came whole (a server that answers streams with JSON)
        await write(as_stream(Entry(flight.kind, flight.body, "", flight.route, 0, 0), include_usage)
                    + timeline.closing_comment() + DONE, more=False)
    else:
        await write(timeline.closing_comment() + DONE, more=False)
    timeline.last_byte = perf_counter()
    return True
