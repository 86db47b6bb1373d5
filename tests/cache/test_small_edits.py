"""Small edits: a kept long prompt found by its sketch when a new one shares most of its text, and the
changes between them cut into windows; anything else is left to the full lookup."""

from __future__ import annotations

import random

import pytest

from firsttoken.cache.small_edits import LONG_WORDS, MOST_PLACES, SmallEdits, is_long, sketch

WORDS = [f"word{i}" for i in range(5000)]


def text(seed: int, count: int = 300) -> list[str]:
    return random.Random(seed).choices(WORDS, k=count)


def kept(*prompts: list[str]) -> SmallEdits:
    edits = SmallEdits(100)
    for i, words in enumerate(prompts):
        edits.add("scope", " ".join(words), f"ref{i}")
    return edits


def test_a_filler_inserted_is_a_small_edit_of_fillers_only() -> None:
    words = text(1)
    asked = [*words[:150], "the", *words[150:]]
    edit = kept(text(2), words, text(3)).find("scope", " ".join(asked))
    assert edit is not None and edit.ref == "ref1" and edit.fillers_only
    assert edit.windows == ((" ".join(asked[144:157]), " ".join(words[144:156])),)  # six words either side


def test_a_content_word_changed_is_judged_in_its_window() -> None:
    words = text(1)
    asked = [*words[:10], "quickly", *words[11:]]
    edit = kept(words).find("scope", " ".join(asked))
    assert edit is not None and not edit.fillers_only
    assert edit.windows == ((" ".join(asked[4:17]), " ".join(words[4:17])),)


def test_the_same_words_spaced_otherwise_are_an_edit_with_nothing_to_judge() -> None:
    words = text(1)
    edit = kept(words).find("scope", "\n".join(words))
    assert edit is not None and edit.windows == () and edit.fillers_only


def test_too_many_changes_are_left_to_the_full_lookup() -> None:
    words = text(1)
    edits = kept(words)
    for places, found in ((MOST_PLACES, True), (MOST_PLACES + 1, False)):
        changed = list(words)
        for at in range(20, 20 + 40 * places, 40):
            changed[at] = "changed"
        assert (edits.find("scope", " ".join(changed)) is not None) is found, places
    rewritten = list(words)
    rewritten[100:140] = text(9, 40)  # more than a tenth of the words
    assert edits.find("scope", " ".join(rewritten)) is None


def test_another_text_has_no_candidate() -> None:
    assert kept(text(1), text(2)).find("scope", " ".join(text(3))) is None


def test_short_prompts_and_other_scopes_are_not_compared() -> None:
    short = text(1, LONG_WORDS - 1)
    edits = kept(short)
    assert len(edits) == 0 and not edits.holds("scope", " ".join(short))
    edits = kept(text(1))
    assert edits.holds("scope", " ".join(text(1))) and not edits.holds("other", " ".join(text(1)))
    assert edits.find("other", " ".join(text(1))) is None


@pytest.mark.parametrize("count", [LONG_WORDS - 1, LONG_WORDS, LONG_WORDS + 1])
def test_long_means_words_not_characters(count: int) -> None:
    assert is_long(" " + " ".join(["w"] * count) + " \n") == (count >= LONG_WORDS)


def test_an_edit_moves_few_chunks() -> None:
    words = text(4, 600)
    edited = [*words[:100], "the", *words[100:]]  # within the first 200 words, which are sketched
    assert len(set(sketch(words)) & set(sketch(edited))) >= 6  # of 8


def test_removed_and_bounded() -> None:
    edits = SmallEdits(2)
    for i in range(3):
        edits.add("scope", " ".join(text(i)), f"ref{i}")
    assert len(edits) == 2 and edits.find("scope", " ".join(text(0))) is None  # the oldest went
    assert edits.find("scope", " ".join(text(1))).ref == "ref1"
    edits.remove("ref1")
    assert edits.find("scope", " ".join(text(1))) is None and len(edits) == 1
    edits.remove("ref2")
    assert not edits.holds("scope", " ".join(text(2)))
