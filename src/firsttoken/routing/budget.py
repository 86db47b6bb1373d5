"""A budget of extra upstream requests as a share of client requests: each request earns `ratio` of a
token, each retry spends one. In an outage every request fails, the tokens run out, and retries stop
multiplying the load on upstreams that are already failing (the retry budget of gRPC and Finagle)."""

from __future__ import annotations


class Budget:
    def __init__(self, ratio: float, reserve: float = 10.0, full: bool = True) -> None:
        self.ratio = ratio
        self.reserve = reserve  # the most saved up: a burst of failures after a quiet hour is still bounded
        # Full: the first requests may already retry. Empty: never more than `ratio` of all requests so far.
        self.tokens = reserve if full else 0.0

    def earn(self) -> None:
        self.tokens = min(self.reserve, self.tokens + self.ratio)

    def spend(self) -> bool:
        """Whether one more upstream request may go; spends a token when it may."""
        if self.tokens < 1.0 - 1e-9:  # ten fifths are one, whatever the float sum says
            return False
        self.tokens -= 1.0
        return True
