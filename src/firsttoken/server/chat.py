"""POST /v1/chat/completions and POST /v1/messages, top to bottom: let the request in, read it in its
format (formats/), size it to a model, then within the client's limits look it up in the edge cache; a hit
is replayed, an identical request in flight is followed, and otherwise this request leads: it goes upstream
(server/stream.py, server/whole.py) and a clean answer is shared with its followers and kept.

Whatever the client's format, the request travels in chat's form and its answer comes back in it; the
Reply writes it in the client's. Only an upstream that speaks the client's format is sent the client's
own request (ChatRequest.build)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from firsttoken.answers import answer_gap
from firsttoken.cache.edge import EdgeCache, Lookup
from firsttoken.cache.entry import Kind
from firsttoken.cache.flight import Flight, Flights
from firsttoken.cache.outcome import CacheOutcome
from firsttoken.config import Streaming
from firsttoken.errors import GatewayError
from firsttoken.formats.chat import CHAT
from firsttoken.formats.client import ClientFormat
from firsttoken.journey.timeline import Timeline
from firsttoken.redact import Redactor
from firsttoken.routing.sizing import TaskRouter
from firsttoken.routing.targets import Target, TargetResolver
from firsttoken.server.admission import Admission
from firsttoken.server.cached import send_cached, send_followed
from firsttoken.server.disconnect import until_disconnect
from firsttoken.server.egress import BuildRequest, Egress
from firsttoken.server.http import Headers, Receive, Scope, Send
from firsttoken.server.reply import Reply
from firsttoken.server.stream import StreamForwarder
from firsttoken.server.whole import Keep, forward_whole
from firsttoken.spend.usage import Tokens, client_wants_usage
from firsttoken.upstream.adapter import UpstreamRequest
from firsttoken.upstream.registry import UpstreamLink

log = logging.getLogger("firsttoken.server")


@dataclass(slots=True)
class ChatRequest:
    """One request, once admitted and sized."""
    scope: Scope
    receive: Receive
    body: dict[str, Any]  # in chat's form
    model: str
    stream: bool
    targets: list[Target]
    format: ClientFormat
    native: dict[str, Any]  # as an upstream that speaks the client's format is sent it
    keyed: dict[str, Any]  # what shapes its answer (the exact cache key's)
    untranslatable: GatewayError | None  # why a chat upstream cannot take it (Parsed.untranslatable)

    def build(self, link: UpstreamLink, target: Target) -> UpstreamRequest:
        """The request as `target`'s upstream takes it: the client's own, when the upstream speaks its format."""
        if link.adapter.speaks(self.format.name):
            return link.adapter.native(self.native, target.model, self.stream, self.scope["headers"])
        if self.untranslatable is not None:
            raise self.untranslatable
        return link.adapter.chat(self.body, target.model, self.stream)

    def whole_answer(self, link: UpstreamLink, data: bytes) -> bytes:
        """An upstream's whole answer in chat's shape: read from the client's format when it was asked in it."""
        if link.adapter.speaks(self.format.name):
            return link.adapter.native_response(data)
        return link.adapter.chat_response(data)


class Generation:
    """One generation route (chat completions, Messages or Responses): the same handling, in its format."""

    def __init__(self, admission: Admission, egress: Egress, resolver: TargetResolver, sizing: TaskRouter | None,
                 cache: EdgeCache | None, credentials: Redactor, streaming: Streaming,
                 format: ClientFormat = CHAT) -> None:
        self.admission = admission
        self.egress = egress
        self.resolver = resolver
        self.sizing = sizing
        self.cache = cache
        self.flights = Flights()
        self.credentials = credentials  # an answer that quotes one is never kept
        self.streaming = streaming
        self.format = format

    async def __call__(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        original = await self.admission.body(scope, receive, timeline)
        parsed = self.format.parse(original, scope["headers"], timeline.tenant)
        body, model, stream = parsed.chat, parsed.model, parsed.stream
        timeline.model, timeline.stream, timeline.api = model, stream, self.format.name
        request = ChatRequest(scope, receive, body, model, stream, await self._targets(scope, body, model, base,
                                                                                   timeline),
                              self.format, parsed.native, parsed.keyed, parsed.untranslatable)
        if parsed.untranslatable is not None and not any(
                self.egress.upstreams[t.upstream].adapter.speaks(self.format.name) for t in request.targets):
            raise parsed.untranslatable  # no target could take it: say so before anything else
        await self.admission.priced(timeline, body, base, request.targets[0].label if request.targets else "")
        reply = Reply(send, base, timeline, self.egress.alarms, self.streaming, client_wants_usage(body),
                      parsed.answering)
        charge = await self.admission.admit(scope, timeline, body, stream)
        try:
            await self._answer(request, reply)
        finally:
            await self.admission.settle(charge, timeline)

    async def _targets(self, scope: Scope, body: dict[str, Any], model: str, base: Headers,
                       timeline: Timeline) -> list[Target]:
        """The targets of the model asked for; for the sizing alias, of the tier the request is sized to (and
        when that is not the default tier, the route it would have taken, for what sizing saved)."""
        sizing = self.sizing
        if sizing is None or model != sizing.settings.alias:
            return self.resolver.resolve(model)
        tier, sized = await sizing.decide(scope["headers"], body)
        base.append((b"x-firsttoken-size", sized))
        tiers, default = sizing.settings.tiers, sizing.settings.default
        if tier != default:
            unsized = self.resolver.resolve(tiers[default][0])
            timeline.sized_from = unsized[0].label if unsized else ""
        return [target for name in tiers[tier] for target in self.resolver.resolve(name)]

    async def _answer(self, request: ChatRequest, reply: Reply) -> None:
        """From the cache, from the identical request in flight, or from upstream (leading the identical
        requests that come meanwhile)."""
        lookup = await self._lookup(request, reply.timeline)
        if lookup is None:
            await self._forward(request, reply)
            return
        if lookup.hit is not None and await self._replay(request, reply, lookup):
            return
        flight = self.flights.get(lookup.key) if lookup.read else None
        if flight is not None:
            joined = await until_disconnect(request.receive, send_followed(reply, flight, request.stream),
                                            self.egress.alarms)
            if joined is not False:  # answered by the identical request in flight, or the client left (None)
                return
        reply.timeline.cache = CacheOutcome.MISS
        flight = self.flights.lead(lookup.key, reply.timeline)
        reply.capture = flight
        keep = self._keeper(lookup, reply.timeline, flight)
        try:
            if lookup.racing is None:
                await self._forward(request, reply, keep)
            else:
                await self._race(request, reply, lookup, flight, keep)
        finally:
            self.flights.land(lookup.key, flight)

    async def _race(self, request: ChatRequest, reply: Reply, lookup: Lookup, flight: Flight, keep: Keep) -> None:
        """The request went upstream with its semantic lookup still running. A hit found before anything of
        the upstream's answer has reached the client answers it (and the requests following it), and the
        upstream request is cancelled: its connection closes, so the provider stops generating; what it may
        bill for the prompt is counted (Timeline.raced)."""
        assert self.cache is not None and lookup.racing is not None
        built: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def build(link: UpstreamLink, target: Target) -> UpstreamRequest:
            upstream_request = request.build(link, target)
            if not built.done():
                built.set_result(None)
            return upstream_request

        forwarding = asyncio.ensure_future(self._forward(request, reply, keep, build))
        try:
            # The lookup starts once the request is on its way: woken after the forwarder's step that built it
            # goes on to write it (started beside it, its model call took the loop and the GIL before the
            # request left, a millisecond at 1 MB).
            await asyncio.wait((built, forwarding), return_when=asyncio.FIRST_COMPLETED)
            racing = asyncio.ensure_future(lookup.racing())
            await asyncio.wait((racing, forwarding), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            forwarding.cancel()
            raise
        if forwarding.done() or reply.started:  # the upstream's answer came first (or a heartbeat went out)
            self.cache.lost_race()
            await forwarding
            return
        if not self.cache.won_race(lookup):
            await forwarding
            return
        assert lookup.hit is not None
        forwarding.cancel()  # before it can write: nothing of it has reached the client
        await asyncio.gather(forwarding, return_exceptions=True)
        timeline = reply.timeline
        timeline.raced = timeline.route or request.targets[0].label
        timeline.hedge = b"; raced=" + timeline.raced.encode()
        reply.capture = None
        flight.finish(lookup.hit.kind, lookup.hit.body)
        if not await self._replay(request, reply, lookup):  # dropped: the request goes upstream after all
            timeline.raced, timeline.hedge = "", b""
            await self._forward(request, reply, keep)

    async def _lookup(self, request: ChatRequest, timeline: Timeline) -> Lookup | None:
        """What the cache has for this request; None when it neither reads nor writes the cache."""
        if self.cache is None:
            return None
        looked_up = perf_counter()
        usual = self.egress.router.usual_first_token_s(request.targets[0], request.stream) if request.targets else None
        lookup = await self.cache.lookup(
            request.scope["headers"], timeline.tenant, request.model, [t.label for t in request.targets],
            request.body, None if request.keyed is request.body else request.keyed, usual)
        timeline.cache_ms = (perf_counter() - looked_up) * 1000.0
        return lookup

    async def _replay(self, request: ChatRequest, reply: Reply, lookup: Lookup) -> bool:
        """The hit, in the shape asked for; False when it could not be replayed (dropped: a miss)."""
        assert self.cache is not None and lookup.hit is not None
        answer = await self.cache.replay(lookup, request.stream, reply.include_usage)
        if answer is None:
            return False
        reply.timeline.reused_tokens = Tokens.in_answer(lookup.hit.body)  # what it saved
        await send_cached(reply, answer, lookup.hit.model, request.stream, lookup.similarity)
        return True

    async def _forward(self, request: ChatRequest, reply: Reply, keep: Keep | None = None,
                       build: BuildRequest | None = None) -> None:
        egress = self.egress
        ordered = egress.router.order(request.model, request.targets, request.stream)  # only for requests sent on
        build = build or request.build
        if request.stream:
            work = StreamForwarder(egress, reply, ordered, build, keep).run()
        else:
            work = forward_whole(egress, reply, ordered, build, request.whole_answer, keep)
        await until_disconnect(request.receive, work, egress.alarms)

    def _keeper(self, lookup: Lookup, timeline: Timeline, flight: Flight) -> Keep:
        """Where a clean answer to this request goes: to the requests that joined it, and into the cache
        when it may be kept."""
        cache = self.cache
        assert cache is not None

        def keep(kind: Kind, answer: bytes, headers: Any) -> None:
            try:
                gap = answer_gap(kind, answer, self.credentials)
            except Exception:  # a bug; but the answer has reached its client, and keeping is optional
                log.exception("could not check an answer from %s; not keeping it", timeline.route)
                gap = "not checked"
            if gap is not None:  # it reached this client as it was; nobody else gets it
                cache.not_keeping(gap)
                log.info("not keeping an answer from %s: %s", timeline.route, gap)
                flight.finish(ended_well=True)
                return
            flight.finish(kind, answer)
            cache.keep(lookup, kind, answer, timeline.route, headers)

        return keep
