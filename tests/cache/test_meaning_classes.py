"""The evaluation set of meaning that one small word carries (tests/cache/data/meaning_classes.json,
written before the guards were tuned on it): per class, no question that needs another answer is served
a stored one, and most true paraphrases still are; and a follow-up whose meaning rests on earlier turns
never meets another conversation's answer, through the real gateway."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import ADMIN, ADMIN_KEY, CLIENT_KEY, UPSTREAM_KEY
from firsttoken.cache.embed import load_embedder
from firsttoken.cache.semantic import DEFAULT_THRESHOLD, SemanticIndex
from support.gateway_process import GatewayProcess
from support.waiting import PATIENCE_S

SET = json.loads((Path(__file__).parent / "data" / "meaning_classes.json").read_text())
# Of each class's 25 true paraphrases, at least this many are served (measured: 19-22, facts 15; the
# rest mostly fall below the similarity threshold, and a few are refused by a guard).
LEAST_SERVED = 14


@pytest.fixture(scope="module")
def embedder():
    return load_embedder()


def served(embedder, stored: str, asked: str) -> bool:
    index = SemanticIndex(embedder, DEFAULT_THRESHOLD)
    index.add("scope", stored, "stored")
    return index.find("scope", asked).match is not None


@pytest.mark.parametrize("name", sorted(SET["classes"]))
def test_no_question_of_the_class_is_served_another_answer(embedder, name: str) -> None:
    wrong = [p for p in SET["classes"][name]["different"] if served(embedder, p["stored"], p["asked"])]
    assert wrong == []


@pytest.mark.parametrize("name", sorted(SET["classes"]))
def test_most_true_paraphrases_of_the_class_are_served(embedder, name: str) -> None:
    paraphrases = SET["classes"][name]["paraphrases"]
    assert sum(served(embedder, p["stored"], p["asked"]) for p in paraphrases) >= LEAST_SERVED


RUN = itertools.count()


def settings(upstream_url: str) -> dict:
    # Every lookup runs (a busy encoder would otherwise skip it, and a skipped lookup is a miss that proves
    # nothing about meeting another conversation's answer).
    return {"upstreams": {"fake": {"url": upstream_url, "key": UPSTREAM_KEY}},
            "keys": [{"name": "app", "key": CLIENT_KEY}], "models": {"chat": ["fake/echo"]}, "admin_key": ADMIN_KEY,
            "cache": {"backend": "sqlite", "path": "cache.db", "semantic": True,
                      "semantic_wait_ms": PATIENCE_S * 1000}}


def ask(gateway: GatewayProcess, messages: list[dict]) -> tuple[str, str]:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model="chat", messages=messages)
    return raw.headers["x-firsttoken-cache"], raw.parse().choices[0].message.content


def test_a_follow_up_never_meets_another_conversations_answer(upstream, tmp_path) -> None:
    """(How many paraphrased follow-ups of one conversation are served is measured in bench/cache_quality.py:
    short follow-ups embed far apart, "make it shorter" / "shorten it please" at 0.70.)"""
    with GatewayProcess(settings(upstream.url), tmp_path) as gateway:
        for conversation in SET["conversations"]:
            own = [{"role": "system", "content": f"Conversation {next(RUN)}."}]  # pairs never meet each other
            assert ask(gateway, own + conversation["stored"])[0] == "miss"
            state, answer = ask(gateway, own + conversation["asked"])
            if not conversation["same"]:
                assert state == "miss", conversation["why"]
                assert answer == f"echo: {conversation['asked'][-1]['content']}"
            elif state.startswith("semantic-hit"):  # the same conversation: its own answer
                assert answer == f"echo: {conversation['stored'][-1]['content']}"
        metrics = text_string_to_metric_families(httpx.get(gateway.url + "/metrics", headers=ADMIN).text)
        [skipped] = [f.samples[0].value for f in metrics if f.name == "firsttoken_semantic_lookups_skipped"]
        assert skipped == 0  # every answer above came from a lookup that ran
