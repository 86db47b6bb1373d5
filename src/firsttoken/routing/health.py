"""Passive health of one target: a circuit breaker fed by the outcomes of real requests, and the
cool-down a 429 asks for.

closed ── `failures` in a row ──▶ open ── `open_s` later ──▶ half-open (one probe at a time)
  ▲                                ▲                              │
  └──────── the probe succeeds ────┼──────── it fails (open twice as long, up to `max_open_s`) ┘

A 429 is not a failure of the target: it is busy, and says for how long (Retry-After). The target is
left out until then, and its breaker is untouched.
"""

from __future__ import annotations

import email.utils
import time
from enum import Enum

DEFAULT_COOL_S = 1.0  # a 429 without a usable Retry-After
MAX_COOL_S = 300.0  # a Retry-After beyond this is taken as this


class State(Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


class Health:
    def __init__(self, failures: int = 5, open_s: float = 10.0, max_open_s: float = 120.0) -> None:
        self.threshold = failures
        self.base_open_s = open_s
        self.max_open_s = max_open_s
        self.state = State.CLOSED
        self.failures = 0  # in a row
        self.open_s = open_s
        self.open_until = 0.0
        self.cooled_until = 0.0
        self.probing = False
        self.on_trial = False  # a probe answered (its first token came) and its request has not ended yet

    def available(self, now: float) -> bool:
        """Whether a request may go to this target now."""
        if now < self.cooled_until:
            return False
        if self.state is State.OPEN and now >= self.open_until:
            self.state = State.HALF_OPEN
        if self.state is State.HALF_OPEN:
            return not self.probing
        return self.state is State.CLOSED

    def started(self) -> None:
        if self.state is State.HALF_OPEN:
            self.probing = True

    def answered(self) -> None:
        """A first token came: a half-open circuit closes. Until the request ends well, the failures in a
        row stand and the probe counts as on trial, so a target that always breaks mid-stream still opens
        its circuit, for twice as long each time."""
        if self.state is State.HALF_OPEN:
            self.state, self.probing, self.on_trial = State.CLOSED, False, True

    def succeeded(self) -> None:
        self.state, self.failures, self.open_s, self.probing = State.CLOSED, 0, self.base_open_s, False
        self.on_trial = False

    def failed(self, now: float) -> None:
        self.failures += 1
        if self.state is State.HALF_OPEN or self.on_trial:
            self.open_s = min(self.open_s * 2, self.max_open_s)
            self.on_trial = False
        elif self.failures < self.threshold:
            return
        self.state, self.open_until, self.probing = State.OPEN, now + self.open_s, False

    def rate_limited(self, now: float, retry_after: str | None) -> None:
        self.cooled_until = max(self.cooled_until, now + retry_after_s(retry_after))
        self.probing = False

    def settled(self) -> None:
        """The request ended with neither verdict (the client's own error): a probe may go again."""
        self.probing = False


def retry_after_s(value: str | None, now: float | None = None) -> float:
    """Retry-After in seconds: a number of seconds or an HTTP date (RFC 9110), bounded."""
    if not value:
        return DEFAULT_COOL_S
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value).timestamp()
        except (TypeError, ValueError):
            return DEFAULT_COOL_S
        seconds = when - (time.time() if now is None else now)
    return min(max(seconds, 0.0), MAX_COOL_S)
