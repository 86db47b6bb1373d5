"""A request that is not streamed: the first target that answers whole and well is the answer; one that
is late is raced by the next (server/race.py). A 200 that is no answer (a page, a body cut short) is the
target's failure, and the next target may try."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import aiohttp

from firsttoken.cache.entry import Kind
from firsttoken.errors import GatewayError
from firsttoken.journey.timeline import Timeline
from firsttoken.routing.outcome import Ended, Outcome
from firsttoken.routing.targets import Target
from firsttoken.server.egress import (
    CONNECTION_ERRORS,
    BuildRequest,
    Egress,
    connection_error,
    passthrough_headers,
    refusal,
)
from firsttoken.server.outlet import Outlet
from firsttoken.server.race import try_targets
from firsttoken.server.reply import Reply
from firsttoken.spend.usage import note_usage
from firsttoken.upstream.registry import UpstreamLink

log = logging.getLogger("firsttoken.forward")

# A whole answer's body in OpenAI's shape; a GatewayError (502) when the upstream's 200 is not an answer.
Translate = Callable[[UpstreamLink, bytes], bytes]
# A clean answer for the edge cache: (kind "json" | "sse", the answer in OpenAI's format, upstream headers).
Keep = Callable[[Kind, bytes, Any], None]


@dataclass(slots=True)
class Fetched:
    """A whole answer read from a target, not yet sent."""
    link: UpstreamLink
    response: aiohttp.ClientResponse
    data: bytes  # in OpenAI's shape
    native: bytes | None = None  # as the upstream said it, when that is the client's format too


async def forward_whole(egress: Egress, reply: Reply, targets: list[Target], build: BuildRequest,
                        translate: Translate, keep: Keep | None = None) -> None:
    async def attempt(target: Target, outlet: Outlet) -> Outcome:
        fetched = await fetch(egress, target, build, translate, outlet.timeline)
        if isinstance(fetched, GatewayError):
            return Outcome.failed(fetched)
        if not await outlet.claim():
            return Outcome(Ended.LOST)
        answered = Outcome.answered(outlet.timeline.sent, outlet.timeline.first_byte)
        await _deliver(fetched, outlet, keep)
        return answered

    outcome = await try_targets(egress.router, targets, False, reply, attempt)
    if outcome.failure is not None:
        log.warning("request failed after %d attempt(s): %s", reply.timeline.attempts, outcome.failure.message)
        await reply.fail(outcome.failure)


async def fetch(egress: Egress, target: Target, build: BuildRequest, translate: Translate,
                timeline: Timeline) -> Fetched | GatewayError:
    """One target's whole answer, read and translated into OpenAI's shape; else why not."""
    attempt = await egress.attempt(target, build, timeline)
    link, response = attempt.link, attempt.response
    if response is None:
        assert attempt.failure is not None
        return attempt.failure
    try:
        data = await egress.read_body(link, response, attempt.sent)
    except GatewayError as error:
        response.close()
        return error
    except CONNECTION_ERRORS as exc:
        response.close()
        return connection_error(link, exc)
    except BaseException:  # cancelled (it lost a race, or the client left): the provider stops generating
        response.close()
        raise
    response.release()
    if response.status >= 300:
        return refusal(link, response, data)
    try:  # an answer may quote the key too (an upstream echoing its request, a debugging proxy)
        scrubbed = link.adapter.scrub(data)
        return Fetched(link, response, translate(link, scrubbed), scrubbed if attempt.native else None)
    except GatewayError as error:  # a 200 that is not an answer
        return error


async def _deliver(fetched: Fetched, outlet: Outlet, keep: Keep | None) -> None:
    response, answer, timeline = fetched.response, fetched.data, outlet.timeline
    note_usage(timeline, answer)
    await outlet.whole(response.status, answer, passthrough_headers(fetched.link, response), fetched.native)
    timeline.last_byte = perf_counter()
    if keep is not None and response.status == 200:
        keep("json", answer, response.headers)
