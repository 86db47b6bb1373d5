"""Asking a client key's rate limits, for tests of them."""

from __future__ import annotations

import math
import time
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


def retry_after_since(started: float, per_request_s: float) -> range:
    """The Retry-After (whole seconds, rounded up) a key refused now may be told, its bucket emptied after
    `started` (time.monotonic()) and refilling a request every `per_request_s`: the whole wait, less
    however long this machine took since (the bucket refilled meanwhile), never less than a second."""
    refilled = time.monotonic() - started
    return range(max(1, math.ceil(per_request_s - refilled)), math.ceil(per_request_s) + 1)


def refills_since(started: float, rpm: int) -> int:
    """Requests beyond its burst that a key's bucket of `rpm` a minute, refilled continuously, may have let
    through since `started` (time.monotonic()): a test asks at the machine's speed, and on a slow day it
    outlasts a refill or two."""
    return int((time.monotonic() - started) * rpm / 60)
