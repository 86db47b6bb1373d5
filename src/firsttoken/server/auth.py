"""Who is calling: a client (by its key, the tenant it speaks for) or the operator (by the admin key).
Keys are compared by their SHA-256, so a lookup's timing says nothing about how much of a guessed key was
right, and the plain keys are not kept in memory maps."""

from __future__ import annotations

import hashlib
import hmac

from pydantic import SecretStr

from firsttoken.config import ClientKey
from firsttoken.errors import GatewayError, unauthorized
from firsttoken.server.http import Scope

ANONYMOUS = "default"


class ClientKeys:
    def __init__(self, keys: list[ClientKey], admin_key: SecretStr | None = None) -> None:
        self._names = {_digest(k.key.get_secret_value().encode()): k.name for k in keys}
        self._admin = None if admin_key is None else _digest(admin_key.get_secret_value().encode())

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

    @property
    def locked(self) -> bool:
        """Whether the operator's routes need the admin key: client keys or an admin key are configured.
        Without either, the gateway answers anyone who reaches it (loopback, or `allow_unauthenticated`)."""
        return bool(self._names) or self._admin is not None

    def admin(self, scope: Scope, what: str) -> None:
        """Raise unless this caller may see `what` (every tenant's data): the admin key, or nothing locked."""
        if not self.locked:
            return
        if self._admin is None:
            raise GatewayError(403, f"{what} is locked: this gateway has client keys, and it shows every tenant's "
                                    f"data. Set admin_key at the top of the config to open it.",
                               type="permission_error", code="admin_key_not_set")
        presented = presented_key(scope)
        if presented is None:
            raise unauthorized(f"{what} needs the admin key (admin_key in the config), sent as "
                               f"'Authorization: Bearer <key>'.")
        if not hmac.compare_digest(_digest(presented), self._admin):
            if self.knows(presented):
                raise GatewayError(403, f"A client key cannot open {what}: it shows every tenant's data. Use the "
                                        f"admin key (admin_key in the config).",
                                   type="permission_error", code="not_admin")
            raise unauthorized(f"That is not the admin key (admin_key in the config); {what} needs it.")

    def viewer(self, scope: Scope) -> str | None:
        """Whose journeys this caller may read: a client key's own tenant's, or every tenant's (None) for the
        operator and on a gateway with nothing locked."""
        if not self.locked:
            return None
        presented = presented_key(scope)
        if presented is None:
            raise unauthorized("Journeys need a key: a client key shows its own, the admin key every tenant's. "
                               "Send it as 'Authorization: Bearer <key>'.")
        tenant = self._names.get(_digest(presented))
        if tenant is not None:
            return tenant
        self.admin(scope, "Every tenant's journeys")
        return None

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
