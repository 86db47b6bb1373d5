"""A streaming request: the SSE start goes out as soon as a target answers (or the first heartbeat is
due), then the relay moves its events into the outlet it was given: the client's, or a hedge lane's
(server/race.py decides which target's stream the client gets)."""

from __future__ import annotations

import asyncio
import logging
from time import perf_counter

import aiohttp
import orjson

from firsttoken.cache.replay import completion_chunks
from firsttoken.errors import CLIENT_GAVE_UP, GatewayError, bad_gateway
from firsttoken.journey.timeline import Timeline
from firsttoken.relay import Relay, RelayResult, Source
from firsttoken.routing.outcome import Ended, Outcome
from firsttoken.routing.targets import Target
from firsttoken.server.deadline import passed_if_clients
from firsttoken.server.egress import (
    CONNECTION_ERRORS,
    Attempt,
    BuildRequest,
    Egress,
    connection_error,
    passthrough_headers,
    refusal,
)
from firsttoken.server.http import ClientStalled
from firsttoken.server.outlet import Outlet
from firsttoken.server.race import try_targets
from firsttoken.server.reply import Reply
from firsttoken.server.whole import Keep
from firsttoken.spend.usage import note_usage
from firsttoken.sse import DONE
from firsttoken.upstream.registry import UpstreamLink

log = logging.getLogger("firsttoken.forward")


class StreamForwarder:
    def __init__(self, egress: Egress, reply: Reply, targets: list[Target], build: BuildRequest,
                 keep: Keep | None = None) -> None:
        self.egress = egress
        self.reply = reply
        self.targets = targets
        self.build = build
        self.keep = keep  # where a clean answer goes (the cache; it comes with the reply's capture)

    async def run(self) -> None:
        reply = self.reply
        reply.keep_alive()
        try:
            try:
                failure = (await try_targets(self.egress.router, self.targets, True, reply, self.attempt)).failure
            except GatewayError as error:  # e.g. a request the next target's wire format cannot carry
                failure = error
            if failure is not None:
                log.warning("stream failed after %d attempt(s): %s", reply.timeline.attempts, failure.message)
                await reply.fail(failure)
        except (GatewayError, ClientStalled, asyncio.CancelledError):
            raise
        except Exception:  # a bug: once the stream has started, end it properly instead of a second start
            if not reply.started or reply.ended:
                raise
            log.exception("stream failed unexpectedly")
            await reply.fail(GatewayError(500, "The gateway failed unexpectedly; this is a bug in firsttoken, "
                                               "and the log has the details.", "server_error", code="internal_error"))
        finally:
            reply.close()

    async def attempt(self, target: Target, outlet: Outlet) -> Outcome:
        """One target's stream, relayed into `outlet`; else why there is none."""
        attempt = await self.egress.attempt(target, self.build, outlet.timeline)
        link, response = attempt.link, attempt.response
        if response is None:
            assert attempt.failure is not None
            return Outcome.failed(attempt.failure)
        try:
            if not (200 <= response.status < 300 and response.content_type.startswith("text/event-stream")):
                return await self._not_a_stream(attempt, response, outlet)
            return await self._relay(target, attempt, response, outlet)
        except CONNECTION_ERRORS as exc:
            return Outcome.failed(connection_error(link, exc))
        finally:
            if not link.pool.releasing(response):
                response.close()  # aborts a stream cut short, so the upstream stops generating

    async def _relay(self, target: Target, attempt: Attempt, response: aiohttp.ClientResponse,
                     outlet: Outlet) -> Outcome:
        link, reply, alarms = attempt.link, self.reply, self.egress.alarms
        gave_up = passed_if_clients(attempt.deadline)
        router = self.egress.router
        assert reply.heartbeat is not None, "a stream keeps its client's connection alive (run)"
        source = Source(link.name, link.settings.timeouts.idle, link.adapter.stream_translator(True, attempt.native),
                        link.adapter.redactor, attempt.native)
        relay = Relay(response, outlet, source, alarms=alarms, heartbeat=reply.heartbeat,
                      first_token_deadline=attempt.deadline, deadline_error=gave_up,
                      strip_usage=not reply.include_usage,  # the usage chunk is ours either way
                      on_first_token=lambda: router.first_token(target))
        await outlet.begin(passthrough_headers(link, response), relay)
        result = await relay.run()
        if not outlet.won:  # a lane whose stream ended before a token: nothing of it reached the client
            if gave_up is not None and result.code == CLIENT_GAVE_UP:
                return Outcome.failed(gave_up)
            why = result.error or "the stream ended without a token"
            return Outcome.failed(bad_gateway(f"upstream {link.name}: {why}", code="upstream_stream_broken"))
        timeline = reply.timeline
        if not reply.ended:
            await reply.write(b"", last=True)
        if result.clean:
            link.pool.release_later(response)
            if self.keep is not None and relay.capture:  # keep comes with a capture to keep from
                self.keep("sse", b"\n\n".join(relay.capture) + b"\n\n", response.headers)
        return _ended(result, timeline)

    async def _not_a_stream(self, attempt: Attempt, response: aiohttp.ClientResponse, outlet: Outlet) -> Outcome:
        """A refusal; or (some servers) a stream request answered with one whole body: a chat completion goes
        out as the chunks a stream of it would have carried; anything else (a page, an error) is the target's
        failure, a 502 while nothing has reached the client, and the next target may try."""
        link = attempt.link
        try:
            data = await self.egress.read_body(link, response, attempt.sent)
        except GatewayError as error:  # a stream's own failures end in the relay
            return Outcome.failed(error)
        if response.status >= 300:
            return Outcome.failed(refusal(link, response, data))
        try:
            adapter = link.adapter
            answer = (adapter.native_response if attempt.native else adapter.chat_response)(adapter.scrub(data))
        except GatewayError as error:
            return Outcome.failed(error)
        if not await outlet.claim():
            return Outcome(Ended.LOST)
        await self._whole_as_stream(link, response, answer)
        return _ended(None, self.reply.timeline)

    async def _whole_as_stream(self, link: UpstreamLink, response: aiohttp.ClientResponse, answer: bytes) -> None:
        reply = self.reply
        await reply.quiet()  # first: a beat in flight may still start the stream
        await reply.begin(passthrough_headers(link, response))
        timeline = reply.timeline
        timeline.first_token = timeline.last_token = perf_counter()
        note_usage(timeline, answer)
        events = completion_chunks(orjson.loads(answer), reply.include_usage)
        await reply.write(events + timeline.closing_comment() + DONE, last=True)
        if self.keep is not None:
            self.keep("json", answer, response.headers)


def _ended(result: RelayResult | None, timeline: Timeline) -> Outcome:
    """How a stream that reached the client ended (None: it came whole), for the router: neither the
    client's deadline passing nor the upstream refusing the request in-stream is the target's fault."""
    if result is None or result.clean:
        return Outcome.answered(timeline.sent, timeline.first_token or timeline.first_byte)
    if result.code == CLIENT_GAVE_UP:
        return Outcome(Ended.CLIENT_DEADLINE)
    return Outcome(Ended.REFUSED if result.refused else Ended.BROKEN)
