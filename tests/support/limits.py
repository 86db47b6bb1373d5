"""Asking a client key's rate limits, for tests of them."""

from __future__ import annotations

from typing import Any

from firsttoken.errors import GatewayError
from firsttoken.routing.client_limits import ClientLimits


async def admitted(limits: ClientLimits, body: dict[str, Any], key: str = "app") -> bool:
    """Whether the limits let one request with this body through (False: they answered 429)."""
    try:
        await limits.admit(key, body)
        return True
    except GatewayError:
        return False
