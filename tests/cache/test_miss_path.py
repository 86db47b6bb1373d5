"""A miss never waits for the semantic lookup. With an embedding model that waits while the test holds it
(support/held_embedder.py, on the encoder's worker thread as any slow model is), a request in a
conversation nobody has had before, or one that may not be served from the cache, answers while the model
is held: neither is embedded at all. A kept prompt is embedded when a later request in its context looks
it up, and then serves that paraphrase. A lookup that outlives its head start races the upstream: the
upstream's answer wins when it comes first; a hit found before it answers, and the upstream request is
cancelled and marked."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import ADMIN, ADMIN_KEY, CLIENT_KEY, UPSTREAM_KEY
from support.faulty_answers import HELD as HELD_UPSTREAM
from support.faulty_answers import HELD_TEXT
from support.gateway_process import GatewayProcess
from support.held_embedder import HELD
from support.waiting import PATIENCE_S, wait_until

TESTS = str(Path(__file__).resolve().parents[1])
HOLD_S = 1.0  # how long the held upstream's first answer takes, at least
RUN = itertools.count()


def settings(upstream_url: str, head_start_ms: float) -> dict:
    return {"upstreams": {"fake": {"url": upstream_url, "key": UPSTREAM_KEY}}, "admin_key": ADMIN_KEY,
            "keys": [{"name": "app", "key": CLIENT_KEY}], "models": {"chat": ["fake/echo"], "slow": ["fake/held"]},
            "cache": {"backend": "sqlite", "path": "cache.db", "semantic": True, "race_budget": 1.0,
                      "embedding": "python:support.held_embedder:HeldEmbedder", "semantic_wait_ms": head_start_ms}}


@pytest.fixture
def patient(upstream, tmp_path) -> Iterator[GatewayProcess]:
    """A gateway whose lookups have as long a head start as a test may wait: each is decided before its
    request leaves."""
    with GatewayProcess(settings(upstream.url, PATIENCE_S * 1000), tmp_path, {"PYTHONPATH": TESTS}) as gateway:
        yield gateway


@pytest.fixture
def hasty(upstream, tmp_path) -> Iterator[GatewayProcess]:
    """A gateway whose requests leave at once: every lookup races the upstream."""
    with GatewayProcess(settings(upstream.url, 0), tmp_path, {"PYTHONPATH": TESTS}) as gateway:
        yield gateway


def ask(gateway: GatewayProcess, question: str, system: str, headers: dict[str, str] | None = None,
        model: str = "chat") -> tuple[str, str, str]:
    """(x-firsttoken-cache, x-firsttoken-route, the answer's text)."""
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0, timeout=PATIENCE_S)
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
        extra_headers=headers)
    return (raw.headers["x-firsttoken-cache"], raw.headers["x-firsttoken-route"],
            raw.parse().choices[0].message.content or "")


def counted(gateway: GatewayProcess) -> dict[str, float]:
    """Prompts embedded (the requests' own, kept ones) and how racing lookups ended, from the metrics."""
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(gateway.url + "/metrics", headers=ADMIN).text):
        for sample in family.samples:
            if sample.name == "firsttoken_semantic_prompts_embedded_total":
                counts[sample.labels["whose"]] = sample.value
            elif sample.name == "firsttoken_semantic_races_total":
                counts[sample.labels["ended"]] = sample.value
            elif sample.name == "firsttoken_semantic_near_copies_total":
                counts["near copies"] = sample.value
            elif sample.name == "firsttoken_semantic_small_edits_total":
                counts["small edits"] = sample.value
    return counts


def conversation() -> str:
    return f"You are assistant number {next(RUN)}."


def test_a_new_conversation_is_never_embedded_and_its_answer_serves_a_later_paraphrase(patient, upstream) -> None:
    system = conversation()
    held = patient.workdir / HELD
    held.touch()
    state, _, answer = ask(patient, "How do I cook beans?", system)  # answered while the model is held
    assert (state, answer) == ("miss", "echo: How do I cook beans?")
    assert ask(patient, "How do I cook beans?", system + " Another.")[0] == "miss"  # another new context
    assert counted(patient)["request"] == counted(patient)["kept"] == 0  # no stored prompt could match either
    held.unlink()
    before = upstream.stats.chats
    state, _, again = ask(patient, "What is the way to cook beans?", system)
    assert state.startswith("semantic-hit") and again == answer
    assert upstream.stats.chats == before
    assert (counted(patient)["request"], counted(patient)["kept"]) == (1, 1)  # one model call: both prompts


def test_a_request_that_may_not_be_served_from_the_cache_is_never_embedded(patient, upstream) -> None:
    system = conversation()
    assert ask(patient, "How do I cook beans?", system)[0] == "miss"
    held = patient.workdir / HELD
    held.touch()
    for headers in ({"cache-control": "no-cache"}, {"x-firsttoken-cache": "refresh"}, {"x-firsttoken-cache": "off"}):
        before = upstream.stats.chats
        _, _, answer = ask(patient, "What is the way to cook beans?", system, headers)
        assert answer == "echo: What is the way to cook beans?" and upstream.stats.chats == before + 1, headers
    assert counted(patient)["request"] == 0
    held.unlink()


def test_a_near_copy_is_served_before_the_request_leaves_without_an_embedding(hasty, upstream) -> None:
    """Even with no head start at all: it is found by a hash, not raced."""
    system = conversation()
    _, _, answer = ask(hasty, "How do I cook beans?", system)
    held = hasty.workdir / HELD
    held.touch()
    before = upstream.stats.chats
    state, route, again = ask(hasty, "Hi! Please, how do I cook beans. Thanks", system)
    assert (state, again) == ("semantic-hit; similarity=1.000", answer) and "raced" not in route
    assert upstream.stats.chats == before
    state, _, other = ask(hasty, "Please, how do I cook 5 beans?", system)  # other words: the upstream answers
    assert (state, other) == ("miss", "echo: Please, how do I cook 5 beans?")
    assert counted(hasty)["near copies"] == 1
    held.unlink()


NOTES = " ".join(f"Note {i}: the shipment from warehouse {chr(65 + i % 26)} left on time and arrived intact."
                 for i in range(12))  # 168 words: a long prompt


def test_a_long_prompt_with_a_filler_added_is_served_without_the_model(patient, upstream) -> None:
    """A small edit: judged by what changed (the guards, on the words around it), with no model call when only
    a filler changed; a changed number is refused."""
    system = conversation()
    question = f"{NOTES} Which shipments arrived late?"
    _, _, answer = ask(patient, question, system)
    held = patient.workdir / HELD
    held.touch()
    before = upstream.stats.chats
    state, _, again = ask(patient, question.replace("arrived late", "really arrived late"), system)
    assert (state, again) == ("semantic-hit; similarity=1.000", answer) and upstream.stats.chats == before
    state, _, other = ask(patient, question.replace("Note 7:", "Note 8:"), system)
    assert (state, other) == ("miss", "echo: " + question.replace("Note 7:", "Note 8:"))
    assert counted(patient)["small edits"] == 1 and counted(patient)["request"] == 0
    held.unlink()
    state, _, reworded = ask(patient, question.replace("Which shipments", "Which shipments finally"), system)
    assert state.startswith("semantic-hit; similarity=0.") and reworded == answer  # the model read the window
    assert counted(patient)["small edits"] == 2


def test_a_prompt_longer_than_the_model_reads_is_judged_only_by_what_changed(patient, upstream) -> None:
    """Its vector would say nothing of what follows its start: it is never embedded, and a small edit of it is
    still served."""
    system = conversation()
    long_notes = f"{NOTES} {NOTES.replace('Note', 'Entry')}"  # 2 000 characters: the model reads 1 200
    question = f"{long_notes} Which shipments arrived late?"
    _, _, answer = ask(patient, question, system)
    held = patient.workdir / HELD
    held.touch()  # a model call would hold the request for the test's patience
    state, _, again = ask(patient, question.replace("arrived late", "really arrived late"), system)
    assert (state, again) == ("semantic-hit; similarity=1.000", answer)
    other = question.replace("on time", "late")  # changed in 24 places: more than a small edit
    assert ask(patient, other, system)[0] == "miss"  # and no lookup beyond it
    assert counted(patient)["request"] == counted(patient)["kept"] == 0
    held.unlink()


def a_slow_first_answer(gateway: GatewayProcess, question: str, system: str) -> str:
    """The first question of a conversation, asked of the held upstream (model "slow") and held at least
    HOLD_S, so that the gateway expects that upstream to take that long: a lookup that could not end before
    an upstream's usual first token is not started. Its x-firsttoken-cache."""
    with HELD_UPSTREAM.shut():
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(ask, gateway, question, system, None, "slow")
            wait_until(lambda: HELD_UPSTREAM.waiting == 1, "the first question to reach the upstream")
            time.sleep(HOLD_S)
            HELD_UPSTREAM.open()
            return first.result(PATIENCE_S)[0]


def test_the_upstream_answers_when_it_is_sooner_than_the_lookup(hasty) -> None:
    system = conversation()
    assert a_slow_first_answer(hasty, "How do I cook beans?", system) == "miss"
    held = hasty.workdir / HELD
    held.touch()
    # The upstream answers at once this time, while the lookup's model call is held.
    state, _, answer = ask(hasty, "What is the way to cook beans?", system, model="slow")
    assert (state, answer) == ("miss", HELD_TEXT)
    assert counted(hasty)["lost"] == 1
    held.unlink()


def test_a_hit_found_before_the_upstream_answers_cancels_the_upstream_request(hasty) -> None:
    system = conversation()
    assert a_slow_first_answer(hasty, "How do I cook beans?", system) == "miss"
    with HELD_UPSTREAM.shut():  # the upstream answers nothing until the test is done
        state, route, answer = ask(hasty, "What is the way to cook beans?", system, model="slow")
    assert state.startswith("semantic-hit") and answer == HELD_TEXT
    assert route == "fake/held; raced=fake/held"
    assert counted(hasty)["won"] == 1
    auth = {"authorization": f"Bearer {CLIENT_KEY}"}
    wait_until(lambda: httpx.get(hasty.url + "/v1/journeys?limit=1", headers=auth).json()["data"][0]["hedge"]
               == "raced=fake/held", "the journey to mark the cancelled request")
