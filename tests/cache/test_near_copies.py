"""Near copies: the same words but for a greeting, a courtesy, closing punctuation, the first letter's case
or spaces at a line's end, found by a hash within a scope; anything else is another prompt."""

from __future__ import annotations

import pytest

from firsttoken.cache.near_copies import NearCopies, near_key, same_words

QUESTION = "How do I cook beans?"


@pytest.mark.parametrize("asked", [
    "How do I cook beans?", "how do I cook beans", "Please: how do I cook beans?", "Hi there, please, how do I cook "
    "beans?", "How do I cook beans? Thanks!", "Hello! How do I cook beans?? Thank you.", "  How do I cook beans?\n",
    "Kindly how do I cook beans - cheers",
])
def test_a_near_copy_has_the_same_key(asked: str) -> None:
    assert near_key("scope", asked) == near_key("scope", QUESTION)


@pytest.mark.parametrize("asked", [
    "How do I cook rice?", "How do I cook beans quickly?", "How  do I cook beans?", "How do i cook beans?",
    "How do I cook beans in a city?", "Please explain: how do I cook beans?", "How do I cook beans? Please not "
    "with salt.",
])
def test_other_words_are_another_prompt(asked: str) -> None:
    assert near_key("scope", asked) != near_key("scope", QUESTION)


def test_a_factorial_keeps_its_mark() -> None:
    assert near_key("scope", "Compute 10!") != near_key("scope", "Compute 10")
    assert near_key("scope", "Compute ten!") == near_key("scope", "Compute ten")


def test_spaces_end_lines_only() -> None:
    code = "def f():\n    return 1  \r\n"
    assert same_words(code) == "def f():\n    return 1"  # the indentation kept: it is the code's syntax
    assert near_key("scope", "Fix this:\n  x = 1") != near_key("scope", "Fix this:\nx = 1")


def test_the_scope_is_part_of_the_key() -> None:
    assert near_key("one", QUESTION) != near_key("two", QUESTION)


def test_courtesies_alone_are_no_prompt_to_match() -> None:
    copies = NearCopies(10)
    copies.add("scope", "Thanks!", "thanks")
    assert near_key("scope", "Please") is None and copies.find("scope", "Please") is None and not len(copies)


def test_found_replaced_removed_and_bounded() -> None:
    copies = NearCopies(2)
    assert copies.find("scope", QUESTION) is None
    copies.add("scope", QUESTION, "a")
    assert copies.find("scope", "Please, how do I cook beans") == "a"
    copies.add("scope", "how do I cook beans", "b")  # the same words kept again: the newest answers
    assert copies.find("scope", QUESTION) == "b" and len(copies) == 1
    copies.remove("a")  # no longer what the words lead to: nothing changes
    assert copies.find("scope", QUESTION) == "b"
    copies.add("scope", "How do I cook rice?", "c")
    copies.add("scope", "How do I cook lentils?", "d")  # one over the bound: the oldest goes
    assert copies.find("scope", QUESTION) is None and len(copies) == 2
    assert copies.find("scope", "how do I cook rice") == "c"
    copies.remove("c")
    assert copies.find("scope", "How do I cook rice?") is None and len(copies) == 1
