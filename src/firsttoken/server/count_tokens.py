"""POST /v1/messages/count_tokens: a Messages request's input tokens, without running it.

An Anthropic target counts them itself: the request passes to its count_tokens endpoint as it came, and
its answer (or refusal) comes back as it was. A model with no Anthropic target has no endpoint that counts
Messages requests: the gateway estimates, about four characters a token (routing/client_limits.py), and
says so in `x-firsttoken-count: estimated`.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from firsttoken.config import Streaming
from firsttoken.formats import messages_request
from firsttoken.formats.messages import MESSAGES
from firsttoken.journey.timeline import Timeline
from firsttoken.routing.client_limits import estimate_tokens
from firsttoken.routing.targets import TargetResolver
from firsttoken.server import validate
from firsttoken.server.admission import Admission
from firsttoken.server.disconnect import until_disconnect
from firsttoken.server.egress import Egress
from firsttoken.server.http import Headers, Receive, Scope, Send
from firsttoken.server.reply import Reply
from firsttoken.server.whole import forward_whole
from firsttoken.upstream.registry import UpstreamLink

ESTIMATED = (b"x-firsttoken-count", b"estimated")


class CountTokens:
    def __init__(self, admission: Admission, egress: Egress, resolver: TargetResolver, streaming: Streaming) -> None:
        self.admission = admission
        self.egress = egress
        self.resolver = resolver
        self.streaming = streaming

    async def __call__(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        body = await self.admission.body(scope, receive, timeline)
        timeline.operation, timeline.api = "count_tokens", MESSAGES.name
        timeline.model = validate.model_name(body)
        counted = {**body, "max_tokens": 1}  # count_tokens takes no max_tokens; the checks want one
        messages_request.check(counted)
        chat = messages_request.chat_request(counted, [])  # only estimated from: what it cannot carry is left out
        reply = Reply(send, base, timeline, self.egress.alarms, self.streaming, answering=MESSAGES)
        upstreams = self.egress.upstreams
        targets = [t for t in self.resolver.resolve(timeline.model)
                   if upstreams[t.upstream].adapter.speaks(MESSAGES.name)]
        charge = await self.admission.admit(scope, timeline, {**chat, "max_tokens": 0}, False)
        try:
            if not targets:
                await reply.whole(200, b"", [ESTIMATED], native=orjson.dumps({"input_tokens": _estimate(chat)}))
                return
            headers = scope["headers"]
            await until_disconnect(receive, forward_whole(
                self.egress, reply, self.egress.router.order(timeline.model, targets, False),
                lambda link, target: link.adapter.count_tokens(body, target.model, headers), _counted),
                self.egress.alarms)
        finally:
            await self.admission.settle(charge, timeline)


def _estimate(chat: dict[str, Any]) -> int:
    """The messages' tokens and the tools' definitions' (often most of an agent's prompt), four characters
    a token."""
    tools = chat.get("tools")
    return estimate_tokens({**chat, "max_tokens": 0}) + (math.ceil(len(orjson.dumps(tools)) / 4) if tools else 0)


def _counted(link: UpstreamLink, data: bytes) -> bytes:
    """The upstream's count as it said it; a 502 when its 200 holds none."""
    try:
        count = orjson.loads(data)
    except orjson.JSONDecodeError:
        count = None
    if not isinstance(count, dict) or not isinstance(count.get("input_tokens"), int):
        raise link.adapter.not_an_answer("a token count", data[:200].decode("utf-8", "replace"))
    return data
