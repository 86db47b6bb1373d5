"""An access log, when asked for (`listen.access_log`, `serve --access-log`): one line per request, whatever
its route and however it ended (a 404 too), with what the journey knows of it.

It goes through `logging` (and so through the redaction every record gets), from the request's own
finally: off by default, it costs the request path nothing then.
"""

from __future__ import annotations

import logging
from time import perf_counter

from firsttoken.journey.timeline import Timeline
from firsttoken.server.http import Message, Scope, Send

log = logging.getLogger("firsttoken.access")


def watching(send: Send, timeline: Timeline) -> Send:
    """`send`, noting the status of the response it starts (routes that make no journey set none)."""
    async def noted(message: Message) -> None:
        if message["type"] == "http.response.start":
            timeline.status = message["status"]
        await send(message)
    return noted


def record(scope: Scope, timeline: Timeline) -> None:
    """The request's line, as it ends."""
    timeline.last_byte = timeline.last_byte or perf_counter()
    log.info("%s", access_line(scope, timeline))


def access_line(scope: Scope, timeline: Timeline) -> str:
    """`req_… POST /v1/chat/completions 200 sim/llama-3.1-8b cache=miss ttft=151ms e2e=670ms`: the path without
    its query (which may carry a key), the status (— when the client left before one), the route and cache
    outcome when the request reached a model, its first token when one came."""
    parts = [timeline.request_id, scope["method"], scope["path"], str(timeline.status or "—")]
    if timeline.tenant:
        parts += [timeline.route or "no-route", f"cache={timeline.cache.value}"]
        if timeline.first_token:
            parts.append(f"ttft={timeline.ttft_ms():.0f}ms")
    parts.append(f"e2e={timeline.e2e_ms():.0f}ms")
    if timeline.error_code:
        parts.append(f"error={timeline.error_code}")
    return " ".join(parts)
