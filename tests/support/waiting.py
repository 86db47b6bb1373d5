"""Waiting for something to happen, not for time to pass.

A test that sleeps a fixed while and then looks bets that a busy two-core machine got there in time; one
that asserts an upper bound on elapsed time bets on the machine's speed. These helpers wait on the
condition itself, under a deadline long enough that only a thing that never happens reaches it, and say
what was awaited when it does. Where time itself is what a test checks (a timeout, a stall bound), it
asserts the bound in the direction a slow machine cannot break (`not_before`), and an upper bound only with
the slack of SLACK (`within`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

# Long enough that a slow day never reaches it, short enough that a thing that never happens fails the
# test well before pytest's own timeout (pyproject.toml: 120 s).
PATIENCE_S = 30.0
# A slow day here ran the suite at half the speed of a quiet one, and a CPU hog on both cores halves it
# again: an upper bound on a duration allows this many times the expected, plus a second of scheduling.
SLACK = 5.0
SCHEDULING_S = 1.0
POLL_S = 0.02


def wait_until(condition: Callable[[], T], what: str = "the condition", timeout_s: float = PATIENCE_S,
               poll_s: float = POLL_S) -> T:
    """The first truthy value `condition()` returns, polled until `timeout_s`; an AssertionError naming
    `what` (and the last value seen) if it never comes."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {timeout_s:g} s for {what}; last saw {value!r}")
        time.sleep(poll_s)


async def wait_until_async(condition: Callable[[], T | Awaitable[T]], what: str = "the condition",
                           timeout_s: float = PATIENCE_S, poll_s: float = POLL_S) -> T:
    """As `wait_until`, on an event loop: `condition` may be a plain function or a coroutine function."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {timeout_s:g} s for {what}; last saw {value!r}")
        await asyncio.sleep(poll_s)


def within(bound_s: float) -> float:
    """The most a duration expected to take `bound_s` may take on a machine several times slower."""
    return bound_s * SLACK + SCHEDULING_S


def not_before(elapsed_s: float, bound_s: float, tolerance_s: float = 0.005) -> bool:
    """Whether `elapsed_s` respected a bound it must not undercut (a timeout that fired, a delay that was
    kept): a slow machine only makes it later. `tolerance_s` absorbs clocks read a hair apart."""
    return elapsed_s >= bound_s - tolerance_s
