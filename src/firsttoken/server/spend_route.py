"""GET /v1/spend: the spend report of `firsttoken spend` (spend/report.py) as JSON, for the dashboard and
for scripts. The admin key sees every key's; a client key sees its own. Query: since (30m, 6h, 7d or a
date; default 30d), by (model, key or day; default key and model), key (the admin's filter)."""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs

from firsttoken.config import ClientKey
from firsttoken.errors import GatewayError
from firsttoken.journey.summary import parse_since
from firsttoken.journey.timeline import Timeline
from firsttoken.server.auth import ClientKeys
from firsttoken.server.http import Headers, Receive, Scope, Send, response_headers, send_json
from firsttoken.spend.report import GROUPINGS, spend_report


class SpendRoute:
    def __init__(self, keys: ClientKeys, ledger_path: str | None, budgets: list[ClientKey]) -> None:
        self.keys = keys
        self.ledger_path = ledger_path
        self.budgets = budgets

    async def __call__(self, scope: Scope, receive: Receive, send: Send, base: Headers, timeline: Timeline) -> None:
        viewer = self.keys.viewer(scope)  # a client key's own tenant, or None: every key's
        asked = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        query = {name: values[-1] for name, values in asked.items()}
        try:
            since = parse_since(query.get("since", "30d"))
        except ValueError as exc:
            raise GatewayError(400, f"since: {exc}", param="since", code="invalid_query") from None
        by = query.get("by", "key,model")
        if by not in GROUPINGS:
            raise GatewayError(400, f"by must be one of model, key, day (or key,model), got {by!r}.", param="by",
                               code="invalid_query")
        key = viewer if viewer is not None else query.get("key")
        if self.ledger_path is None:
            raise GatewayError(404, "This gateway keeps no spend ledger (spend.log: null in its config).",
                               code="spend_not_kept")
        report = await asyncio.to_thread(spend_report, self.ledger_path, since, by, key, self.budgets)
        await send_json(send, 200, {"object": "spend", **report}, response_headers(base, timeline))
