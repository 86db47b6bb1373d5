"""The semantic cache through the real gateway, with the real local embedding model: a paraphrase is
served with its similarity shown, a question that only looks similar goes upstream, the same question in
another conversation or for another tenant never meets the first, and the index survives a restart, a
crash, and is shared by every gateway on one Redis."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from conftest import CLIENT_KEY, OTHER_CLIENT_KEY, UPSTREAM_KEY
from support.gateway_process import GatewayProcess
from support.waiting import PATIENCE_S, wait_until

RUN = itertools.count()


def settings(upstream_url: str, **cache: object) -> dict:
    # A gateway skips the semantic lookup when its encoder is busy (semantic_wait_ms, 15 ms by default), and
    # a busy machine keeps it busy: every lookup here must run, so that a hit, and a miss, mean what they say.
    return {"upstreams": {"fake": {"url": upstream_url, "key": UPSTREAM_KEY}},
            "keys": [{"name": "app", "key": CLIENT_KEY}, {"name": "other", "key": OTHER_CLIENT_KEY}],
            "models": {"chat": ["fake/echo"]},
            "cache": {"backend": "sqlite", "path": "cache.db", "semantic": True, "similarity": 0.85,
                      "semantic_wait_ms": PATIENCE_S * 1000, **cache}}


@pytest.fixture(scope="module")
def gateway(upstream, tmp_path_factory):
    with GatewayProcess(settings(upstream.url), tmp_path_factory.mktemp("semantic")) as running:
        yield running


def ask(gateway: GatewayProcess, question: str, key: str = CLIENT_KEY, system: str | None = None,
        stream: bool = False, headers: dict[str, str] | None = None) -> tuple[str, str]:
    """(x-firsttoken-cache, the answer's text)."""
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model="chat", messages=messages, stream=stream,
                                                           extra_headers=headers)
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    else:
        text = raw.parse().choices[0].message.content
    return raw.headers["x-firsttoken-cache"], text


def context() -> str:
    """A system prompt of this test's own, so that tests sharing the gateway never meet."""
    return f"You are assistant number {next(RUN)}."


def test_a_paraphrase_is_served_with_its_similarity(gateway, upstream) -> None:
    system = context()
    state, first = ask(gateway, "How do I cook beans?", system=system)
    assert state == "miss" and first == "echo: How do I cook beans?"
    before = upstream.stats.chats
    state, again = ask(gateway, "What is the way to cook beans?", system=system, stream=True)
    assert state.startswith("semantic-hit; similarity=0.9") and again == first
    assert upstream.stats.chats == before
    auth = {"authorization": f"Bearer {CLIENT_KEY}"}
    journey = httpx.get(gateway.url + "/v1/journeys?limit=1", headers=auth).json()["data"][0]
    assert "in other words" in journey["verdict"]


@pytest.mark.parametrize(("stored", "asked"), [
    ("Is the museum open on Mondays?", "Is the museum closed on Mondays?"),
    ("Convert 5 pounds to kilograms.", "Convert 5 kilograms to pounds."),
    ("Refund order 55120.", "Refund order 55102."),
])
def test_a_question_that_only_looks_similar_goes_upstream(gateway, stored: str, asked: str) -> None:
    system = context()
    assert ask(gateway, stored, system=system)[0] == "miss"
    state, text = ask(gateway, asked, system=system)
    assert state == "miss" and text == f"echo: {asked}"


def test_another_conversation_or_tenant_never_meets_the_first(gateway) -> None:
    system = context()
    assert ask(gateway, "How do I cook rice?", system=system)[0] == "miss"
    assert ask(gateway, "What is the way to cook rice?", system=context())[0] == "miss"  # another system prompt
    assert ask(gateway, "What is the way to cook rice?", system=system, key=OTHER_CLIENT_KEY)[0] == "miss"


def test_the_index_survives_a_restart(upstream, tmp_path) -> None:
    with GatewayProcess(settings(upstream.url), tmp_path) as first:
        assert ask(first, "How do I boil an egg?")[0] == "miss"
    with GatewayProcess(settings(upstream.url), tmp_path) as second:
        assert ask(second, "What is the way to boil an egg?")[0].startswith("semantic-hit")


def written(path: Path) -> tuple[int, int]:
    """(answers, prompts) the store's writer has committed to the file."""
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT count(*) FROM answers").fetchone()[0], db.execute(
            "SELECT count(*) FROM prompts").fetchone()[0]
    finally:
        db.close()


def test_the_index_survives_a_crash(upstream, tmp_path) -> None:
    with GatewayProcess(settings(upstream.url), tmp_path) as first:
        assert ask(first, "How do I peel a mango?")[0] == "miss"
        wait_until(lambda: written(tmp_path / "cache.db") == (1, 1), "the store's writer to commit the answer")
        first.process.kill()  # no shutdown: nothing is saved on the way out
        first.process.wait()
    with GatewayProcess(settings(upstream.url), tmp_path) as second:
        assert ask(second, "What is the way to peel a mango?")[0].startswith("semantic-hit")


def test_gateways_on_one_redis_share_their_paraphrases(upstream, redis_server, tmp_path) -> None:
    shared = settings(upstream.url, backend="redis", url=redis_server.url, prefix=f"semantic{next(RUN)}:")
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    with GatewayProcess(shared, tmp_path / "a") as one, GatewayProcess(shared, tmp_path / "b") as two:
        assert ask(one, "How do I sharpen a kitchen knife?")[0] == "miss"
        paraphrase, keep_nothing = "What is the way to sharpen a kitchen knife?", {"cache-control": "no-store"}
        # two follows the stream: it learns of the prompt a moment later (asked meanwhile, it keeps nothing)
        state = wait_until(lambda: (found := ask(two, paraphrase, headers=keep_nothing)[0]) != "miss" and found,
                           "gateway two to learn the prompt from the stream", poll_s=0.2)
        assert state.startswith("semantic-hit")
        with GatewayProcess(shared, tmp_path / "c") as three:  # started after: it reads the stream at start
            assert ask(three, paraphrase)[0].startswith("semantic-hit")


def test_messages_paraphrases_hit_and_never_meet_chat_answers(gateway, upstream) -> None:
    """The semantic cache on /v1/messages: a paraphrase is a hit, in Anthropic's events; the same question
    asked over chat completions first is no hit for it (formats never share answers)."""
    system = context()
    state, _ = ask(gateway, "How long do lentils take to cook?", system=system)
    assert state == "miss"
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=CLIENT_KEY, max_retries=0)

    def ask_claude(question: str) -> tuple[str, str]:
        raw = claude.messages.with_raw_response.create(model="chat", max_tokens=50, system=system, stream=True,
                                                       messages=[{"role": "user", "content": question}])
        text = "".join(e.delta.text for e in raw.parse() if e.type == "content_block_delta")
        return raw.headers["x-firsttoken-cache"], text

    state, first = ask_claude("How long do lentils take to cook?")
    assert state == "miss" and first == "echo: How long do lentils take to cook?"
    before = upstream.stats.chats
    state, again = ask_claude("How much time do lentils need to cook?")
    assert state.startswith("semantic-hit") and again == first and upstream.stats.chats == before
