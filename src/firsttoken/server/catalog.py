"""The model API's other routes: POST /v1/embeddings (forwarded like a whole answer) and GET /v1/models
(every alias and every upstream's model)."""

from __future__ import annotations

from firsttoken.config import SIM_UPSTREAM, Streaming
from firsttoken.journey.timeline import Timeline
from firsttoken.routing.targets import TargetResolver
from firsttoken.server import validate
from firsttoken.server.admission import Admission
from firsttoken.server.disconnect import until_disconnect
from firsttoken.server.egress import Egress
from firsttoken.server.http import Headers, Receive, Scope, Send, response_headers, send_json
from firsttoken.server.reply import Reply
from firsttoken.server.whole import forward_whole


class Catalog:
    def __init__(self, admission: Admission, egress: Egress, resolver: TargetResolver, streaming: Streaming,
                 simulated: str | None) -> None:
        self.admission = admission
        self.egress = egress
        self.resolver = resolver
        self.streaming = streaming
        self.simulated = simulated  # what the simulated region's models say of themselves, when it runs

    async def embeddings(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        body = await self.admission.body(scope, receive, timeline)
        timeline.operation = "embeddings"
        timeline.model = validate.embeddings_request(body)
        targets = self.resolver.resolve(timeline.model)
        reply = Reply(send, base, timeline, self.egress.alarms, self.streaming)
        charge = await self.admission.admit(scope, timeline, body, False)
        try:
            targets = self.egress.router.order(timeline.model, targets, False)  # only for requests sent on
            await until_disconnect(receive, forward_whole(
                self.egress, reply, targets, lambda link, target: link.adapter.embeddings(body, target.model),
                lambda link, data: link.adapter.embeddings_response(data)), self.egress.alarms)
        finally:
            await self.admission.settle(charge, timeline)

    async def models(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        self.admission.keys.tenant(scope)
        data = [{"id": alias, "object": "model", "created": 0, "owned_by": "firsttoken",
                 "targets": [t.label for t in targets]} for alias, targets in self.resolver.aliases.items()]
        for name in self.egress.upstreams.links:
            data += [{"id": f"{name}/{model}", "object": "model", "created": 0, "owned_by": name}
                     for model in self.resolver.models_of(name)]
        if self.simulated is not None:  # say plainly which answers come from a simulation
            for entry in data:
                if str(entry["id"]).startswith(f"{SIM_UPSTREAM}/"):
                    entry["description"] = self.simulated
        await send_json(send, 200, {"object": "list", "data": data}, response_headers(base, timeline))
