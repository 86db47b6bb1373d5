"""Answering from the edge cache: a stored answer, in the shape the client asked for, at once; or the
answer of an identical request still in flight, as it comes."""

from __future__ import annotations

from time import perf_counter

from firsttoken.cache.entry import Entry
from firsttoken.cache.flight import Flight
from firsttoken.cache.outcome import CacheOutcome
from firsttoken.cache.replay import ReplayError, is_usage_chunk, replay
from firsttoken.errors import bad_gateway
from firsttoken.server.reply import Reply
from firsttoken.spend.usage import Tokens
from firsttoken.sse import DONE


async def send_cached(reply: Reply, answer: bytes, route: str, stream: bool, similarity: float | None = None) -> None:
    """A stored answer, already in the shape asked for (cache.replay): a stream's events or a whole answer;
    `similarity` for a paraphrase's."""
    timeline = reply.timeline
    timeline.cache = CacheOutcome.HIT if similarity is None else CacheOutcome.SEMANTIC_HIT
    timeline.route, timeline.similarity = route, similarity
    if stream:
        timeline.first_byte = timeline.first_token = perf_counter()
        await reply.start_stream()
        # One write: the whole answer, its closing comment and [DONE] in one segment on the wire.
        await reply.write(answer + timeline.closing_comment() + DONE, last=True)
    else:
        await reply.whole(200, answer)
    timeline.last_byte = perf_counter()


async def send_followed(reply: Reply, flight: Flight, stream: bool) -> bool:
    """The answer of the identical request in flight, as it comes. False when that one failed before this
    one had sent anything (or its answer was not one to share): it should then go upstream itself."""
    timeline, include_usage = reply.timeline, reply.include_usage
    timeline.cache = CacheOutcome.JOINED
    if not stream:
        await flight.finished()
        timeline.reused_tokens = Tokens.of(flight.leader)
        answer = _replayed(flight, False, include_usage)
        if answer is None:
            return False
        timeline.route = flight.route
        await reply.whole(200, answer)
        timeline.last_byte = perf_counter()
        return True

    async def write(data: bytes, last: bool = False) -> None:
        if not reply.started:
            timeline.route = flight.route
            timeline.first_byte = timeline.first_token = perf_counter()
            await reply.start_stream()
        await reply.write(data, last)  # a follower that reads nothing is dropped; the flight does not wait

    async for piece in flight.follow():
        if include_usage or not is_usage_chunk(piece):
            await write(piece + b"\n\n")
    timeline.reused_tokens = Tokens.of(flight.leader)  # its usage is in by the end of its stream
    if reply.started and flight.ended_well and flight.body is None:  # an answer not to keep, followed whole
        await write(timeline.closing_comment() + DONE, last=True)
    elif flight.kind is None or flight.body is None:  # the leader failed (or has nothing to share)
        if not reply.started:
            return False
        await reply.fail(bad_gateway("the identical request this one joined failed mid-stream",
                                     code="upstream_stream_broken"))
    elif not reply.started:  # the leader's answer came whole (a server that answers streams with JSON)
        answer = _replayed(flight, True, include_usage)
        if answer is None:
            return False
        await write(answer + timeline.closing_comment() + DONE, last=True)
    else:
        await write(timeline.closing_comment() + DONE, last=True)
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
