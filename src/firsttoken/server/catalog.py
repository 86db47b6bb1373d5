"""The model API's other routes: POST /v1/embeddings (forwarded like a whole answer), GET /v1/models
(the names a client can ask for: every alias, every bare model name an upstream lists, every
`upstream/model`), GET /v1/models/{id} (one of them, or any name that resolves), and GET /openapi.json
(every route, with those names as the examples of `model`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from firsttoken.config import SIM_UPSTREAM, Streaming
from firsttoken.errors import not_found
from firsttoken.journey.timeline import Timeline
from firsttoken.routing.targets import Target, TargetResolver
from firsttoken.server import openapi, validate
from firsttoken.server.admission import Admission
from firsttoken.server.disconnect import until_disconnect
from firsttoken.server.egress import Egress
from firsttoken.server.http import Headers, Receive, Scope, Send, header, response_headers, send_json
from firsttoken.server.reply import Reply
from firsttoken.server.whole import forward_whole


class Catalog:
    def __init__(self, admission: Admission, egress: Egress, resolver: TargetResolver, streaming: Streaming,
                 simulated: str | None, dashboard: bool) -> None:
        self.admission = admission
        self.dashboard = dashboard  # whether the document lists the dashboard's routes
        self.egress = egress
        self.resolver = resolver
        self.streaming = streaming
        self.simulated = simulated  # what the simulated region's models say of themselves, when it runs

    async def embeddings(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        body = await self.admission.body(scope, receive, timeline)
        timeline.operation = timeline.api = "embeddings"
        timeline.model = validate.embeddings_request(body)
        targets = self.resolver.resolve(timeline.model)
        await self.admission.priced(timeline, body, base, targets[0].label if targets else "")
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
        entries = self._entries()
        if speaks_anthropic(scope):  # Anthropic's SDKs list models in Anthropic's shape
            data = [anthropic_model(entry) for entry in entries]
            listed = {"data": data, "has_more": False, "first_id": data[0]["id"] if data else None,
                      "last_id": data[-1]["id"] if data else None}
            await send_json(send, 200, listed, response_headers(base, timeline))
            return
        await send_json(send, 200, {"object": "list", "data": entries}, response_headers(base, timeline))

    async def model(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        """One model by its id: a listed name, or an `upstream/model` the gateway would route; 404 otherwise."""
        self.admission.keys.tenant(scope)
        name = unquote(scope["path"].split("/models/", 1)[1])
        entry = next((e for e in self._entries() if e["id"] == name), None)
        if entry is None and "/" in name:
            entry = self._entry(name, self.resolver.resolve(name))  # an unknown upstream is a 404 there
        if entry is None:
            raise not_found(f"The model {name!r} is not listed here; GET /v1/models lists the names to ask for.",
                            param="model", code="model_not_found")
        await send_json(send, 200, anthropic_model(entry) if speaks_anthropic(scope) else entry,
                        response_headers(base, timeline))

    async def openapi(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        """The routes and their formats, open to every caller like /healthz: it holds no tenant's data."""
        names = [entry["id"] for entry in self._entries()]
        await send_json(send, 200, openapi.document(names, self.dashboard), response_headers(base, timeline))

    def _entries(self) -> list[dict[str, Any]]:
        """Aliases, then bare names (each model an upstream lists, routed to every upstream that lists it),
        then `upstream/model`."""
        entries = [self._entry(alias, targets) for alias, targets in self.resolver.aliases.items()]
        listed = {f"{name}/{model}": [Target(name, model)]
                  for name in self.egress.upstreams.links for model in self.resolver.models_of(name)}
        bare: dict[str, list[Target]] = {}
        for targets in listed.values():
            if targets[0].model not in self.resolver.aliases:  # an alias of that name takes it
                bare.setdefault(targets[0].model, []).extend(targets)
        entries += [self._entry(name, targets) for name, targets in bare.items()]
        return entries + [self._entry(label, targets) for label, targets in listed.items()]

    def _entry(self, name: str, targets: list[Target]) -> dict[str, Any]:
        direct = len(targets) == 1 and name == targets[0].label
        entry: dict[str, Any] = {"id": name, "object": "model", "created": 0,
                                 "owned_by": targets[0].upstream if direct else "firsttoken"}
        if not direct:
            entry["targets"] = [t.label for t in targets]
        if self.simulated is not None and any(t.upstream == SIM_UPSTREAM for t in targets):
            entry["description"] = self.simulated  # say plainly which answers come from a simulation
        return entry


def speaks_anthropic(scope: Scope) -> bool:
    """A request from an Anthropic SDK (they all send anthropic-version): it reads Anthropic's shapes."""
    return header(scope, b"anthropic-version") is not None


def anthropic_model(entry: dict[str, Any]) -> dict[str, Any]:
    """A model as Anthropic's API describes one, with what firsttoken says of it besides."""
    extra = {key: value for key, value in entry.items() if key in ("targets", "description", "owned_by")}
    return {"type": "model", "id": entry["id"], "display_name": entry["id"], "created_at": "1970-01-01T00:00:00Z",
            **extra}
