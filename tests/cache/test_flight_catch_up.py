"""A follower that joins a long answer late catches up on what the flight holds a slice at a time, with the
event loop running between: it never holds every other request of the worker while it does."""

from __future__ import annotations

from firsttoken.cache.flight import CATCH_UP, Flight
from firsttoken.journey.timeline import Timeline
from support.loop_turns import LoopTurns


async def test_a_late_follower_catches_up_in_slices_and_gets_every_event_in_order() -> None:
    flight = Flight(Timeline())
    pieces = [f"data: {i}".encode() for i in range(3 * CATCH_UP + 5)]
    for piece in pieces:
        flight.append(piece)
    flight.finish()
    async with LoopTurns() as other:
        followed = [piece async for piece in flight.follow()]
    assert followed == pieces
    assert other.turns >= 3  # the loop ran between the slices
