"""The exact cache's key: everything in a chat request that can change the answer, and whose answer it is.

The request is hashed as a whole, less the fields that change only its delivery (a denylist, so that a
field OpenAI adds tomorrow changes the key rather than being served another request's answer). The
model is replaced by what it resolves to (an alias's targets, in order), so that re-pointing an alias
never serves the old model's answers. Sampling numbers are compared as numbers (`1` and `1.0` are one
temperature). The tenant is part of the key: two client keys never share an answer unless configured to.

A request that ends with a user's text is hashed in two steps, its context (everything but that text)
and then the text: the first digest is the semantic cache's scope (the prompts a paraphrase may match),
the second the exact key, so that a 1 MB agent turn is read once for both. The hash is BLAKE3 over its
canonical JSON: 0.16 ms a megabyte here, where SHA-256 took 0.59 and BLAKE2b 1.1 (docs/benchmarks.md); a
cryptographic hash, since a key that another tenant's request could be made to collide with would serve
that tenant's answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from blake3 import blake3

# Fields that shape how an answer is delivered or recorded, not what it says.
DELIVERY_ONLY = frozenset({"stream", "stream_options", "user", "metadata", "store", "prompt_cache_key",
                           "safety_identifier", "service_tier"})
_NUMERIC = ("temperature", "top_p", "presence_penalty", "frequency_penalty")
# Bumped when what is kept changes meaning: answers kept before are never read again (they expire). 2: only
# answers checked complete are kept (earlier versions kept a broken one now and then). 3: SHA-256, and a
# request ending with a user's text hashed as its context, then that text. 4: BLAKE3.
VERSION = 4
_KEY_BYTES = 16
_TEXT = b"\x00text:"  # what separates the context from the text: canonical JSON never holds a NUL byte


@dataclass(frozen=True, slots=True)
class Keys:
    exact: str  # the answer's key
    scope: str | None = None  # the context's digest: None when the request does not end with a user's text
    text: str | None = None  # that text


def exact_key(tenant: str, targets: Sequence[str], body: dict[str, Any]) -> str:
    """A hex digest over the tenant, the resolved targets and the answer-shaping request fields."""
    return request_keys(tenant, targets, body).exact


def request_keys(tenant: str, targets: Sequence[str], body: dict[str, Any]) -> Keys:
    """The exact key, and where the request ends with a user's text, its context's digest and the text."""
    split = last_user_text(body)
    if split is None:
        return Keys(_digest(tenant, targets, body).hexdigest(_KEY_BYTES))
    text, context = split
    digest = _digest(tenant, targets, context)
    scope = digest.hexdigest(_KEY_BYTES)  # BLAKE3 reads on after a digest: the context is hashed once
    digest.update(_TEXT + text.encode("utf-8", "surrogatepass"))
    return Keys(digest.hexdigest(_KEY_BYTES), scope, text)


def _digest(tenant: str, targets: Sequence[str], body: dict[str, Any]) -> blake3:
    request = {k: v for k, v in body.items() if k not in DELIVERY_ONLY and k != "model"}
    for name in _NUMERIC:
        value = request.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            request[name] = float(value)
    canonical = orjson.dumps({"v": VERSION, "tenant": tenant, "targets": list(targets), "request": request},
                             option=orjson.OPT_SORT_KEYS)
    return blake3(canonical)


def last_user_text(body: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The text of the request's last message when a user wrote it, and the request without that text
    (its context: the scope a paraphrase must share); None when the request ends otherwise. Chat's
    messages and Anthropic's read alike: a string, or parts that are all text."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return None
    last = messages[-1]
    if last.get("role") != "user":
        return None
    content = last.get("content")
    if isinstance(content, list):
        parts = [p for p in content if isinstance(p, dict)]
        if len(parts) != len(content) or any(p.get("type") != "text" for p in parts):
            return None  # an image or a file: only an exact match will do
        content = "\n".join(str(p.get("text", "")) for p in parts)
    if not isinstance(content, str) or not content.strip():
        return None
    return content, {**body, "messages": [*messages[:-1], {**last, "content": None}]}
