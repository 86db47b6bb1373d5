"""Kept prompts not yet embedded: held per scope, handed out newest first and at most as many as asked,
given back when they could not be embedded, and the oldest forgotten past the bound on their text."""

from __future__ import annotations

from firsttoken.cache.unembedded import Unembedded, UnembeddedPrompts


def prompt(n: int, scope: str = "s", size: int = 10) -> Unembedded:
    return Unembedded(f"k{n}", scope, str(n) * size)


def test_a_lookup_takes_its_scopes_newest_prompts_and_gives_back_what_it_could_not_embed() -> None:
    held = UnembeddedPrompts()
    for n in range(5):
        held.add(prompt(n))
    held.add(prompt(9, scope="other"))
    taken = held.take("s", 2)
    assert [p.key for p in taken] == ["k3", "k4"] and "k4" not in held and len(held) == 4
    for p in taken:
        held.add(p)
    assert [p.key for p in held.take("s", 10)] == ["k0", "k1", "k2", "k3", "k4"]
    assert not held.holds("s") and held.holds("other")


def test_past_the_bound_the_oldest_are_forgotten() -> None:
    held = UnembeddedPrompts(max_chars=25)
    for n in range(3):
        held.add(prompt(n))  # 10 characters each
    assert "k0" not in held and "k1" in held and "k2" in held
    held.discard("k1")
    assert [p.key for p in held.take("s", 10)] == ["k2"]
