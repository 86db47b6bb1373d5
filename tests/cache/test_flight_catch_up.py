"""A follower that joins a long answer late catches up on what the flight holds a slice at a time, with the
event loop running between: it never holds every other request of the worker while it does."""

from __future__ import annotations

import asyncio

from firsttoken.cache.flight import CATCH_UP, Flight
from firsttoken.journey.timeline import Timeline


async def test_a_late_follower_catches_up_in_slices_and_gets_every_event_in_order() -> None:
    flight = Flight(Timeline())
    pieces = [f"data: {i}".encode() for i in range(3 * CATCH_UP + 5)]
    for piece in pieces:
        flight.append(piece)
    flight.finish()
    turns = 0

    async def another_request() -> None:  # what the rest of the worker does meanwhile
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.ensure_future(another_request())
    await asyncio.sleep(0)
    started = turns
    followed = [piece async for piece in flight.follow()]
    other.cancel()
    assert followed == pieces
    assert turns - started >= 3  # the loop ran between the slices
