"""A miss never waits for the semantic lookup. With an embedding model that waits while the test holds it
(support/held_embedder.py, on the encoder's worker thread as any slow model is), a request answers while
the model is held: a conversation nobody has had before, and a request that asks not to be served from
the cache, are never embedded on their way; their answers' prompts are embedded afterwards, and then
serve a paraphrase. A lookup that could match waits no longer than `semantic_wait_ms`."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import ADMIN, ADMIN_KEY, CLIENT_KEY, UPSTREAM_KEY
from support.gateway_process import GatewayProcess
from support.held_embedder import HELD
from support.waiting import PATIENCE_S, wait_until

TESTS = str(Path(__file__).resolve().parents[1])
RUN = itertools.count()


def settings(upstream_url: str, wait_ms: float) -> dict:
    return {"upstreams": {"fake": {"url": upstream_url, "key": UPSTREAM_KEY}},
            "keys": [{"name": "app", "key": CLIENT_KEY}], "models": {"chat": ["fake/echo"]}, "admin_key": ADMIN_KEY,
            "cache": {"backend": "sqlite", "path": "cache.db", "semantic": True,
                      "embedding": "python:support.held_embedder:HeldEmbedder", "semantic_wait_ms": wait_ms}}


@pytest.fixture
def patient(upstream, tmp_path) -> Iterator[GatewayProcess]:
    """A gateway whose lookups wait for the model as long as a test may (a held one makes them skip)."""
    with GatewayProcess(settings(upstream.url, PATIENCE_S * 1000), tmp_path, {"PYTHONPATH": TESTS}) as gateway:
        yield gateway


def ask(gateway: GatewayProcess, question: str, system: str, headers: dict[str, str] | None = None) -> tuple[str, str]:
    """(x-firsttoken-cache, the answer's text)."""
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="chat", messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
        extra_headers=headers)
    return raw.headers["x-firsttoken-cache"], raw.parse().choices[0].message.content or ""


def embedded(gateway: GatewayProcess) -> dict[str, float]:
    """Prompts embedded for lookups and after answers, and lookups skipped, from the gateway's metrics."""
    counts = {"lookup": 0.0, "after_answer": 0.0, "skipped": 0.0}
    for family in text_string_to_metric_families(httpx.get(gateway.url + "/metrics", headers=ADMIN).text):
        for sample in family.samples:
            if sample.name == "firsttoken_semantic_prompts_embedded_total":
                counts[sample.labels["when"]] = sample.value
            elif sample.name == "firsttoken_semantic_lookups_skipped_total":
                counts["skipped"] = sample.value
    return counts


def kept_and_embedded(gateway: GatewayProcess, question: str, system: str) -> str:
    """Ask in a new conversation; wait until its prompt is embedded after the answer. The answer."""
    after = embedded(gateway)["after_answer"]
    state, answer = ask(gateway, question, system)
    assert state == "miss"
    wait_until(lambda: embedded(gateway)["after_answer"] > after, "the kept prompt embedded after its answer")
    return answer


def test_a_new_conversation_leaves_at_once_and_its_answer_later_serves_a_paraphrase(patient, upstream) -> None:
    system = f"You are assistant number {next(RUN)}."
    held = patient.workdir / HELD
    held.touch()
    state, answer = ask(patient, "How do I cook beans?", system)  # answered while the model is held
    assert (state, answer) == ("miss", "echo: How do I cook beans?")
    state, _ = ask(patient, "And lentils, how long?", system + " Again.")  # another context nobody has had
    assert state == "miss"
    assert embedded(patient)["lookup"] == 0  # neither was embedded on its way: no stored prompt could match
    held.unlink()
    wait_until(lambda: embedded(patient)["after_answer"] == 2, "both prompts embedded after their answers")
    before = upstream.stats.chats
    state, again = ask(patient, "What is the way to cook beans?", system)
    assert state.startswith("semantic-hit") and again == answer
    assert upstream.stats.chats == before and embedded(patient)["lookup"] == 1


def test_a_request_that_may_not_be_served_from_the_cache_is_never_embedded_on_its_way(patient, upstream) -> None:
    system = f"You are assistant number {next(RUN)}."
    kept_and_embedded(patient, "How do I cook beans?", system)
    held = patient.workdir / HELD
    held.touch()
    looked_up = embedded(patient)["lookup"]
    for headers in ({"cache-control": "no-cache"}, {"x-firsttoken-cache": "refresh"}, {"x-firsttoken-cache": "off"}):
        before = upstream.stats.chats
        state, answer = ask(patient, "What is the way to cook beans?", system, headers)
        assert answer == "echo: What is the way to cook beans?" and upstream.stats.chats == before + 1, headers
    assert embedded(patient)["lookup"] == looked_up
    held.unlink()


def test_a_lookup_that_could_match_waits_no_longer_than_its_bound(upstream, tmp_path) -> None:
    system = f"You are assistant number {next(RUN)}."
    with GatewayProcess(settings(upstream.url, 50), tmp_path, {"PYTHONPATH": TESTS}) as gateway:
        kept_and_embedded(gateway, "How do I cook beans?", system)
        held = gateway.workdir / HELD
        held.touch()
        state, answer = ask(gateway, "What is the way to cook beans?", system)  # its model call never returns
        assert (state, answer) == ("miss", "echo: What is the way to cook beans?")
        assert embedded(gateway)["skipped"] == 1
        held.unlink()
