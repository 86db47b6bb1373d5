"""Where one attempt's answer goes. Every attempt, hedged or not, writes into an outlet: the client's own
(server/reply.py, which writes straight through) or a hedge lane's (server/race.py, which holds its
writes until its attempt wins the race, then writes through the client's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from firsttoken.relay import Relay, Sink
from firsttoken.server.http import Headers


class Outlet(Sink, Protocol):
    """A relay's sink (its timeline: a hedge's own until it wins, then the request's), and more."""

    lost: bool  # its race was decided for another attempt, and the router told so already

    @property
    def won(self) -> bool:
        """Its writes reach the client."""
        ...

    async def claim(self) -> bool:
        """The attempt has a whole answer: whether it may be the response (a lane's claim decides its race)."""
        ...

    async def begin(self, headers: Headers, relay: Relay | None = None) -> None:
        """An upstream stream begins: the headers to pass on, and the relay that will move it."""
        ...

    async def whole(self, status: int, body: bytes, extra: Sequence[tuple[bytes, bytes]] = (),
                    native: bytes | None = None) -> None:
        """A whole answer, once claimed (Reply.whole)."""
        ...
