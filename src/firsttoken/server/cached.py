"""Answering from the edge cache: the stored answer, in the shape the client asked for, at once."""

from __future__ import annotations

from time import perf_counter

from firsttoken.cache.entry import Entry
from firsttoken.cache.replay import as_completion, as_stream
from firsttoken.journey.timeline import Timeline
from firsttoken.server.http import SSE_HEADERS, Headers, Send, response_headers, send_bytes
from firsttoken.sse import DONE


async def send_cached(send: Send, base_headers: Headers, timeline: Timeline, entry: Entry, stream: bool,
                      include_usage: bool) -> None:
    timeline.cache, timeline.route, timeline.status = b"hit", entry.model, 200
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
