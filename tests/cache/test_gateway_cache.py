"""The exact cache through the real gateway, with the openai SDK as the client (semantic matching is off
here; test_semantic_cache.py has it): a repeated question is answered at once without crossing to the
upstream, in whichever shape it is asked; tenants never share; only clean, storable answers are kept;
the request's own headers and the per-model TTL are obeyed."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading

import httpx
import openai
import pytest
import redis

from conftest import ADMIN, ADMIN_KEY, CLIENT_KEY, OTHER_CLIENT_KEY, UPSTREAM_KEY
from support.gateway_process import GatewayProcess, free_port
from support.waiting import wait_until

QUESTION = itertools.count()
# What fake/slow-stream answers to a long question: a word every 50 ms for 2 s, so that an identical request
# sent once the first is streaming joins it even on a busy machine (the test upstream has no gate to hold it).
LONG = " ".join(["and"] * 40)


def settings(upstream_url: str, **cache: object) -> dict:
    return {"upstreams": {"fake": {"url": upstream_url, "key": UPSTREAM_KEY}},
            "keys": [{"name": "app", "key": CLIENT_KEY}, {"name": "other", "key": OTHER_CLIENT_KEY}],
            "admin_key": ADMIN_KEY,
            "models": {"chat": ["fake/echo"], "fresh": ["fake/echo"]},
            "cache": {"backend": "sqlite", "path": "cache.db", "models": {"fresh": 0}, "semantic": False, **cache}}


@pytest.fixture(scope="module")
def cached(upstream, tmp_path_factory):
    with GatewayProcess(settings(upstream.url), tmp_path_factory.mktemp("cache")) as gateway:
        yield gateway


def client(gateway: GatewayProcess, key: str = CLIENT_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)


def question(more: str = "") -> list[dict]:
    """A question not asked before in this run."""
    return [{"role": "user", "content": f"what is the capital of country number {next(QUESTION)} {more}".strip()}]


def ask(gateway: GatewayProcess, messages: list[dict], key: str = CLIENT_KEY, model: str = "chat",
        headers: dict | None = None) -> tuple[str, str]:
    """(x-firsttoken-cache, the answer's text) of a non-stream request."""
    raw = client(gateway, key).chat.completions.with_raw_response.create(model=model, messages=messages,
                                                                         extra_headers=headers)
    return raw.headers["x-firsttoken-cache"], raw.parse().choices[0].message.content


def ask_stream(gateway: GatewayProcess, messages: list[dict], usage: bool = False) -> tuple[str, str, object]:
    """(x-firsttoken-cache, the streamed text, the usage chunk's usage) of a stream request."""
    raw = client(gateway).chat.completions.with_raw_response.create(
        model="chat", messages=messages, stream=True, stream_options={"include_usage": True} if usage else None)
    text, found = "", None
    for chunk in raw.parse():
        if chunk.usage is not None:
            found = chunk.usage
        text += "".join(c.delta.content or "" for c in chunk.choices)
    return raw.headers["x-firsttoken-cache"], text, found


def upstream_calls(upstream, fn):
    before = upstream.stats.chats
    result = fn()
    return result, upstream.stats.chats - before


def test_a_repeated_question_is_answered_from_the_cache(cached, upstream) -> None:
    messages = question()
    (state, first), calls = upstream_calls(upstream, lambda: ask(cached, messages))
    assert state == "miss" and calls == 1 and first.startswith("echo: what is the capital")
    (state, again), calls = upstream_calls(upstream, lambda: ask(cached, messages))
    assert state == "hit" and calls == 0 and again == first
    auth = {"authorization": f"Bearer {CLIENT_KEY}"}
    latest = httpx.get(cached.url + "/v1/journeys?limit=1", headers=auth).json()["data"][0]
    assert latest["cache"] == "hit" and latest["verdict"].startswith("answered from the edge cache in ")
    assert latest["route"] == "fake/echo"


def test_a_stream_is_stored_and_replayed_in_either_shape(cached, upstream) -> None:
    messages = question()
    state, streamed, usage = ask_stream(cached, messages, usage=True)
    assert state == "miss" and usage is not None
    (replayed, calls) = upstream_calls(upstream, lambda: ask_stream(cached, messages, usage=True))
    assert calls == 0 and replayed[0] == "hit" and replayed[1] == streamed and replayed[2] == usage
    state, text, usage = ask_stream(cached, messages, usage=False)
    assert (state, text, usage) == ("hit", streamed, None)  # usage only when asked for
    assert ask(cached, messages) == ("hit", streamed)  # folded into a whole completion


def test_a_whole_answer_replays_as_a_stream(cached) -> None:
    messages = question()
    state, text = ask(cached, messages)
    assert state == "miss"
    state, streamed, usage = ask_stream(cached, messages, usage=True)
    assert (state, streamed) == ("hit", text) and usage is not None and usage.completion_tokens > 0


def test_two_tenants_never_see_each_others_answers(cached, upstream) -> None:
    messages = question()
    assert ask(cached, messages)[0] == "miss"
    (state, _), calls = upstream_calls(upstream, lambda: ask(cached, messages, key=OTHER_CLIENT_KEY))
    assert state == "miss" and calls == 1
    assert ask(cached, messages, key=OTHER_CLIENT_KEY)[0] == "hit"


def test_the_requests_own_headers_are_obeyed(cached, upstream) -> None:
    messages = question()
    assert ask(cached, messages, headers={"Cache-Control": "no-store"})[0] == "miss"
    assert ask(cached, messages)[0] == "miss"  # nothing was kept
    (state, _), calls = upstream_calls(upstream, lambda: ask(cached, messages, headers={"Cache-Control": "no-cache"}))
    assert state == "miss" and calls == 1
    assert ask(cached, messages, headers={"x-firsttoken-cache": "off"})[0] == "bypass"
    assert ask(cached, messages, headers={"x-firsttoken-cache": "refresh"})[0] == "miss"
    assert ask(cached, messages)[0] == "hit"
    with pytest.raises(openai.BadRequestError, match="x-firsttoken-cache"):
        ask(cached, messages, headers={"x-firsttoken-cache": "sometimes"})


def test_a_model_whose_ttl_is_zero_is_not_cached_unless_forced(cached) -> None:
    messages = question()
    assert ask(cached, messages, model="fresh")[0] == "bypass"
    assert ask(cached, messages, model="fresh")[0] == "bypass"
    assert ask(cached, messages, model="fresh", headers={"x-firsttoken-cache": "force"})[0] == "miss"
    assert ask(cached, messages, model="fresh", headers={"x-firsttoken-cache": "force"})[0] == "hit"


def test_only_clean_storable_answers_are_kept(cached, upstream) -> None:
    messages = question()
    for model in ("fake/error-500", "fake/no-store"):
        for _ in range(2):
            try:
                state, _ = ask(cached, messages, model=model)
                assert state == "miss"
            except openai.InternalServerError:
                pass
    broken = dict(model="fake/fail-midstream", messages=messages, stream=True)
    for _ in range(2):
        response = httpx.post(cached.url + "/v1/chat/completions", json=broken,
                              headers={"authorization": f"Bearer {CLIENT_KEY}"}, timeout=10)
        assert response.headers["x-firsttoken-cache"] == "miss" and b"upstream_stream_broken" in response.content


def test_answers_survive_a_restart(upstream, tmp_path) -> None:
    messages = question()
    with GatewayProcess(settings(upstream.url), tmp_path) as gateway:
        assert ask(gateway, messages)[0] == "miss"
    with GatewayProcess(settings(upstream.url), tmp_path) as gateway:
        assert ask(gateway, messages)[0] == "hit"
        stats = httpx.get(gateway.url + "/metrics", headers=ADMIN).text
        assert 'firsttoken_cache_requests_total{result="hit"} 1.0' in stats


def test_cache_stats_and_purge_from_the_command_line(upstream, tmp_path) -> None:
    messages = question()
    with GatewayProcess(settings(upstream.url), tmp_path) as gateway:
        ask(gateway, messages)
        ask(gateway, messages, key=OTHER_CLIENT_KEY)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "firsttoken", "cache", *args, "--config",
                               str(tmp_path / "firsttoken.yaml")], capture_output=True, text=True, timeout=30,
                              cwd=tmp_path)

    stats = json.loads(run("stats", "--json").stdout)
    assert stats["entries"] == 2 and {r["tenant"] for r in stats["by"]} == {"app", "other"}
    assert {r["model"] for r in stats["by"]} == {"fake/echo"}
    assert "other" in run("stats").stdout
    assert run("purge", "--tenant", "other", "--model", "echo").stdout.strip() == "purged 1 answer"
    assert json.loads(run("stats", "--json").stdout)["entries"] == 1
    assert run("purge").stdout.strip() == "purged 1 answer"
    with GatewayProcess(settings(upstream.url), tmp_path) as gateway:
        assert ask(gateway, messages)[0] == "miss"


def test_identical_requests_in_flight_join_the_first(cached, upstream) -> None:
    messages = question(LONG)
    results: dict[str, tuple] = {}
    streaming = threading.Event()

    def leader() -> None:
        raw = client(cached).chat.completions.with_raw_response.create(model="fake/slow-stream", messages=messages,
                                                                         stream=True)
        text = ""
        for chunk in raw.parse():
            text += "".join(c.delta.content or "" for c in chunk.choices)
            if text:
                streaming.set()
        results["leader"] = (raw.headers["x-firsttoken-cache"], text)

    def streamer() -> None:
        raw = client(cached).chat.completions.with_raw_response.create(model="fake/slow-stream", messages=messages,
                                                                         stream=True)
        results["stream"] = (raw.headers["x-firsttoken-cache"],
                             "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices))

    def whole() -> None:
        results["whole"] = ask(cached, messages, model="fake/slow-stream")

    before = upstream.stats.chats
    first = threading.Thread(target=leader)
    first.start()
    assert streaming.wait(30), "the leader never streamed"
    others = [threading.Thread(target=streamer), threading.Thread(target=whole)]
    for thread in others:
        thread.start()
    for thread in (first, *others):
        thread.join(30)
    assert upstream.stats.chats - before == 1
    state, text = results["leader"]
    assert state == "miss" and text.startswith("echo: what is the capital")
    assert results["stream"] == ("hit; joined", text) and results["whole"] == ("hit; joined", text)
    assert ask(cached, messages, model="fake/slow-stream") == ("hit", text)  # and it was kept


def test_a_request_that_joined_a_broken_stream_gets_its_error(cached, upstream) -> None:
    body = {"model": "fake/fail-midstream", "messages": question(), "stream": True}
    auth = {"authorization": f"Bearer {CLIENT_KEY}"}
    replies: list[httpx.Response] = []

    def post() -> None:
        replies.append(httpx.post(cached.url + "/v1/chat/completions", json=body, headers=auth, timeout=10))

    threads = [threading.Thread(target=post) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert len(replies) == 3
    for reply in replies:  # each ends as a broken stream does: an error event, then [DONE]
        assert reply.status_code == 200 and reply.content.rstrip().endswith(b"data: [DONE]")
        assert b"upstream_stream_broken" in reply.content


def test_two_gateways_share_one_redis_cache(upstream, redis_server, tmp_path) -> None:
    messages = question()
    prefix = f"gateways{next(QUESTION)}:"
    shared = settings(upstream.url, backend="redis", url=redis_server.url, prefix=prefix)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with GatewayProcess(shared, tmp_path / "a") as one, GatewayProcess(shared, tmp_path / "b") as two, \
            redis.Redis.from_url(redis_server.url) as seen:
        assert ask(one, messages)[0] == "miss"
        wait_until(lambda: seen.keys(f"{prefix}a:*"), "gateway one's answer to reach Redis")  # written after it
        (state, _), calls = upstream_calls(upstream, lambda: ask(two, messages))
        assert state == "hit" and calls == 0
        assert ask_stream(two, messages)[0] == "hit"


def test_a_redis_that_is_down_only_means_misses(upstream, tmp_path) -> None:
    down = settings(upstream.url, backend="redis", url=f"redis://127.0.0.1:{free_port()}/0")
    with GatewayProcess(down, tmp_path) as gateway:
        messages = question()
        assert ask(gateway, messages)[0] == "miss" and ask(gateway, messages)[0] == "miss"


def test_a_joined_request_whose_client_leaves_goes_nowhere(cached, upstream) -> None:
    messages = question(LONG)
    body = {"model": "fake/slow-stream", "messages": messages, "stream": True}
    auth = {"authorization": f"Bearer {CLIENT_KEY}"}
    before = upstream.stats.chats
    first = threading.Thread(target=lambda: httpx.post(cached.url + "/v1/chat/completions", json=body, headers=auth,
                                                       timeout=30))
    first.start()
    wait_until(lambda: upstream.stats.chats > before, "the leader to be upstream")
    with httpx.stream("POST", cached.url + "/v1/chat/completions", json=body, headers=auth, timeout=30) as reply:
        assert reply.headers["x-firsttoken-cache"] == "hit; joined"
        follower = reply.headers["x-request-id"]
        next(reply.iter_raw())  # the first of its events, then the client hangs up
    first.join(30)

    def ended() -> bool:  # the follower's journey is over: whatever it was to send upstream, it has sent
        found = httpx.get(f"{cached.url}/v1/journeys?limit=20", headers=auth).json()["data"]
        return any(j["request_id"] == follower for j in found)

    wait_until(ended, "the follower's journey to end")
    assert upstream.stats.chats - before == 1
