"""How one attempt at a target ended, as a value: what reached the client (an answer, or nothing and why)
and what it says of the target. The router records it in one call (Router.record)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from firsttoken.errors import CLIENT_GAVE_UP, GatewayError

# Statuses that say the target failed, not the request: the next target may well answer.
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


class Ended(Enum):
    ANSWERED = "answered"              # a whole answer, or a stream that ended well
    BROKEN = "broken"                  # unreachable, timed out, a 5xx, no answer, a stream cut: the target's fault
    RATE_LIMITED = "rate_limited"      # a 429: the target cools for a while
    REFUSED = "refused"                # the request's fault (a 4xx, refused in-stream): nothing of the target
    CLIENT_DEADLINE = "client_deadline"  # the client's own deadline passed: nothing of the target
    LOST = "lost"                      # another target answered first (a hedged race)
    ABANDONED = "abandoned"            # the client left, or the gateway failed: nothing of the target


@dataclass(frozen=True, slots=True)
class Outcome:
    ended: Ended
    # Nothing reached the client from this attempt: why (the error the client hears if no other target
    # answers). None: the client has had its answer, whole or cut short in-stream.
    failure: GatewayError | None = None
    # ANSWERED: time to its first token (or a whole answer's first byte); LOST: how long it had waited,
    # a lower bound on its first token. None: unknown.
    ms: float | None = None

    @classmethod
    def answered(cls, sent: float, first: float) -> Outcome:
        """An answer whose first token (or byte) came at `first`, the request having left at `sent`
        (perf_counter readings; 0.0: not known)."""
        return cls(Ended.ANSWERED, ms=(first - sent) * 1000.0 if first and sent else None)

    @classmethod
    def failed(cls, failure: GatewayError) -> Outcome:
        """No answer: what the failure says of the target."""
        if failure.code == CLIENT_GAVE_UP:
            ended = Ended.CLIENT_DEADLINE
        elif failure.status == 429:
            ended = Ended.RATE_LIMITED
        elif failure.status in RETRYABLE_STATUS:
            ended = Ended.BROKEN
        else:
            ended = Ended.REFUSED
        return cls(ended, failure)

    @property
    def retryable(self) -> bool:
        """Nothing reached the client and the target, not the request, failed: the next target may try."""
        return self.failure is not None and self.ended in (Ended.BROKEN, Ended.RATE_LIMITED)

    @property
    def retry_after(self) -> str | None:
        return self.failure.headers.get("retry-after") if self.failure is not None else None


ABANDONED = Outcome(Ended.ABANDONED)
