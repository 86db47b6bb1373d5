"""The exact cache's key: everything in a chat request that can change the answer, and whose answer it is.

The request is hashed as a whole, less the fields that change only its delivery (a denylist, so that a
field OpenAI adds tomorrow changes the key rather than being served another request's answer). The
model is replaced by what it resolves to (an alias's targets, in order), so that re-pointing an alias
never serves the old model's answers. Sampling numbers are compared as numbers (`1` and `1.0` are one
temperature). The tenant is part of the key: two client keys never share an answer unless configured to.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import orjson

# Fields that shape how an answer is delivered or recorded, not what it says.
DELIVERY_ONLY = frozenset({"stream", "stream_options", "user", "metadata", "store", "prompt_cache_key",
                           "safety_identifier", "service_tier"})
_NUMERIC = ("temperature", "top_p", "presence_penalty", "frequency_penalty")
# Bumped when what is kept changes meaning: answers kept before are never read again (they expire). 2: only
# answers checked complete are kept (earlier versions kept a broken one now and then).
VERSION = 2


def exact_key(tenant: str, targets: Sequence[str], body: dict[str, Any]) -> str:
    """A hex digest over the tenant, the resolved targets and the answer-shaping request fields."""
    request = {k: v for k, v in body.items() if k not in DELIVERY_ONLY and k != "model"}
    for name in _NUMERIC:
        value = request.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            request[name] = float(value)
    canonical = orjson.dumps({"v": VERSION, "tenant": tenant, "targets": list(targets), "request": request},
                             option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(canonical, digest_size=16).hexdigest()
