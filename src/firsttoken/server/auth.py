"""Client keys: who is calling. Keys are compared by their SHA-256, so a lookup's timing says
nothing about how much of a guessed key was right, and the plain keys are not kept in memory maps."""

from __future__ import annotations

import hashlib

from firsttoken.config import ClientKey
from firsttoken.errors import unauthorized
from firsttoken.server.http import Scope

ANONYMOUS = "default"


class ClientKeys:
    def __init__(self, keys: list[ClientKey]) -> None:
        self._names = {_digest(k.key.get_secret_value().encode()): k.name for k in keys}

    def tenant(self, scope: Scope) -> str:
        """The name of the calling key; raises 401 when keys are configured and this one is not."""
        if not self._names:
            return ANONYMOUS
        presented = presented_key(scope)
        if presented is None:
            raise unauthorized("No API key was sent. Send this gateway's client key as "
                               "'Authorization: Bearer <key>' (the OpenAI SDK's api_key).")
        name = self._names.get(_digest(presented))
        if name is None:
            raise unauthorized("The API key is not one of this gateway's client keys; check the key "
                               "your app sends (the OpenAI SDK's api_key) against the gateway's keys:.")
        return name

    def knows(self, key: bytes) -> bool:
        """Whether `key` is one of the client keys."""
        return _digest(key) in self._names

    def __bool__(self) -> bool:
        """Whether any keys are configured (without them, every caller is one anonymous tenant)."""
        return bool(self._names)


def presented_key(scope: Scope) -> bytes | None:
    """The key the caller sent, in whichever header its SDK uses."""
    for key, value in scope["headers"]:
        if key == b"authorization":
            scheme, _, token = value.partition(b" ")
            return token.strip() if scheme.lower() == b"bearer" else value.strip()
        if key in (b"x-api-key", b"api-key"):  # Anthropic- and Azure-style clients
            return value.strip()
    return None


def _digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()
