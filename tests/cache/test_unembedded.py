"""Kept prompts not yet embedded: held per scope, shown newest first and at most as many as asked, the
oldest forgotten past the bound on their text; a lookup takes along as many as leave it ending in time."""

from __future__ import annotations

from firsttoken.cache.edge import EdgeCache, Prompt
from firsttoken.cache.encoder import Encoder
from firsttoken.cache.unembedded import Unembedded, UnembeddedPrompts
from firsttoken.config import Cache


def prompt(n: int, scope: str = "s", size: int = 10) -> Unembedded:
    return Unembedded(f"k{n}", scope, str(n) * size)


def test_a_lookup_sees_its_scopes_newest_prompts_first_and_no_more_than_it_asks() -> None:
    held = UnembeddedPrompts()
    for n in range(5):
        held.add(prompt(n))
    held.add(prompt(9, scope="other"))
    assert [p.key for p in held.newest("s", 2)] == ["k4", "k3"] and len(held) == 6  # still held
    for key in ("k4", "k3", "k2", "k1", "k0"):
        held.discard(key)  # embedded
    assert held.newest("s", 10) == [] and not held.holds("s") and held.holds("other")


def test_past_the_bound_the_oldest_are_forgotten() -> None:
    held = UnembeddedPrompts(max_chars=25)
    for n in range(3):
        held.add(prompt(n))  # 10 characters each
    assert "k0" not in held and "k1" in held and "k2" in held
    held.discard("k1")
    assert [p.key for p in held.newest("s", 10)] == ["k2"]


async def test_a_lookup_takes_along_the_newest_kept_prompts_that_leave_it_ending_in_time() -> None:
    cache = EdgeCache(Cache(backend="memory"))
    await cache.start()
    assert isinstance(cache.encoder, Encoder)
    cache.encoder.per_char_s = 0.001  # 1 ms a character, so that the costs below are known
    for n in range(5):
        cache.unembedded.add(prompt(n, size=20))  # 20 ms each
    own = Prompt("s", "y" * 20)
    # The lookup's model call: 4 ms, and 20 ms for each text; within 70 ms, its own and two more.
    along = cache._along(own, 0.070)
    assert [p.key for p in along] == ["k4", "k3"]
    assert "k4" not in cache.unembedded and "k3" not in cache.unembedded and "k2" in cache.unembedded
    await cache.close()
