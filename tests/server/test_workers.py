"""`serve --workers 2` behaves as one gateway: metrics, journeys and routing answer for every worker
whichever takes the connection; the workers share one simulated region; warm connections and keep-warm
pings are the one gateway's, not one set per worker."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import ADMIN, CLIENT_KEY, OTHER_CLIENT_KEY, gateway_settings
from support.gateway_process import GatewayProcess
from support.limits import refills_since
from support.openai_upstream import UpstreamThread
from support.waiting import not_before, wait_until

WORKERS = ["--workers", "2"]
AS_APP = {"authorization": f"Bearer {CLIENT_KEY}"}


@pytest.fixture
def own_upstream():
    with UpstreamThread() as server:
        yield server


def worker_of(request_id: str) -> str:
    """The worker that served a request: request ids start with a per-process prefix."""
    return request_id[len("req_"):len("req_") + 12]


def ask(url: str, body: dict, headers: dict[str, str], number: int) -> httpx.Response:
    """One request on a fresh connection: the kernel hands it to whichever worker accepts first."""
    question = {"role": "user", "content": f"question {number}"}
    return httpx.post(url, json={**body, "messages": [question]}, headers=headers, timeout=10)


def workers_seen(answers: list[httpx.Response]) -> int:
    return len({worker_of(a.headers["x-request-id"]) for a in answers})


def ask_until_both_workers(url: str, body: dict, headers: dict[str, str], least: int = 6,
                           most: int = 80) -> list[httpx.Response]:
    """At least `least` requests, and more until both workers have served some."""
    answers: list[httpx.Response] = []
    for number in range(most):
        answers.append(ask(url, body, headers, number))
        if workers_seen(answers) == 2 and len(answers) >= least:
            return answers
    raise AssertionError(f"{most} connections all reached one worker")


def both_up(gateway: GatewayProcess, headers: dict[str, str]) -> GatewayProcess:
    """The gateway once both workers answer (the readiness wait saw one of them)."""
    wait_until(lambda: httpx.get(gateway.url + "/metrics", headers=headers).headers.get("x-firsttoken-workers")
               == "2/2", "the second worker to answer its sibling", poll_s=0.1)
    return gateway


def limited(answers: list[httpx.Response], rpm: int, refilled: int) -> None:
    """The first `rpm` let through, every one after refused but for what the bucket refilled meanwhile."""
    statuses = [a.status_code for a in answers]
    assert statuses[:rpm] == [200] * rpm, statuses
    late = Counter(statuses[rpm:])
    assert set(late) <= {200, 429} and late[200] <= refilled, (statuses, refilled)


def requests_counted(exposition: str) -> float:
    return sum(sample.value for family in text_string_to_metric_families(exposition)
               if family.name == "gen_ai_client_operation_duration_seconds"
               for sample in family.samples if sample.name.endswith("_count"))


def test_metrics_journeys_routing_and_the_access_log_answer_for_every_worker(own_upstream, tmp_path) -> None:
    with GatewayProcess(gateway_settings(own_upstream.url), tmp_path, args=[*WORKERS, "--access-log"]) as gateway:
        both_up(gateway, ADMIN)
        answers = ask_until_both_workers(gateway.url + "/v1/chat/completions", {"model": "chat"}, AS_APP)
        assert all(a.status_code == 200 for a in answers)
        ids = [a.headers["x-request-id"] for a in answers]
        # A request is counted as its journey ends, which may come a moment after its client has the answer.
        wait_until(lambda: requests_counted(httpx.get(gateway.url + "/metrics", headers=ADMIN).text) == len(ids),
                   "every request counted")
        for _ in range(4):  # each scrape on its own connection, so both workers answer some
            scrape = httpx.get(gateway.url + "/metrics", headers=ADMIN)
            assert scrape.headers["x-firsttoken-workers"] == "2/2"
            assert requests_counted(scrape.text) == len(ids)
            families = {f.name: f for f in text_string_to_metric_families(scrape.text)}
            rss_workers = {s.labels["worker"] for s in families["process_resident_memory_bytes"].samples}
            assert rss_workers == {"0", "1"}  # a gauge is each worker's own, labelled
            listed = httpx.get(gateway.url + "/v1/journeys", params={"limit": 1000}, headers=ADMIN).json()["data"]
            assert sorted(j["request_id"] for j in listed) == sorted(ids)
        for request_id in ids:
            assert httpx.get(f"{gateway.url}/v1/journeys/{request_id}", headers=AS_APP).status_code == 200
            # another tenant finds it on no worker
            other = httpx.get(f"{gateway.url}/v1/journeys/{request_id}",
                              headers={"authorization": f"Bearer {OTHER_CLIENT_KEY}"})
            assert other.status_code == 404
        routing = httpx.get(gateway.url + "/v1/routing", headers=ADMIN).json()["data"]
        assert {(r["target"], r["worker"]) for r in routing} >= {("fake/echo", 0), ("fake/echo", 1)}
        wait_until(lambda: all(f"{request_id} POST /v1/chat/completions 200" in gateway.log() for request_id in ids),
                   "every request in the access log")


def test_warm_connections_are_split_among_the_workers(own_upstream, tmp_path) -> None:
    with GatewayProcess(gateway_settings(own_upstream.url), tmp_path, args=WORKERS) as gateway:
        # A worker is ready once its warm-up round is done: each worker's readiness, with what it opened.
        ready: dict[str, httpx.Response] = {}

        def both_ready() -> bool:
            answer = httpx.get(gateway.url + "/readyz")
            if answer.status_code == 200:
                ready.setdefault(worker_of(answer.headers["x-request-id"]), answer)
            return len(ready) == 2

        wait_until(both_ready, "both workers ready")
        opened = [r.json()["upstreams"]["fake"]["connections_opened"] for r in ready.values()]
        assert opened == [1, 1], opened  # `pool.warm: 2`: one each, not two each
        assert len(own_upstream.stats.connections) == 2
        answers = ask_until_both_workers(gateway.url + "/v1/chat/completions", {"model": "chat"}, AS_APP)
        # each worker's first request found its warm connection: no handshake paid
        firsts = {}
        for answer in answers:
            firsts.setdefault(worker_of(answer.headers["x-request-id"]), answer)
        assert all("connect;dur=0.00" in a.headers["server-timing"] for a in firsts.values())


def test_keep_warm_pings_once_for_the_gateway_not_once_per_worker(own_upstream, tmp_path) -> None:
    idle_s, pings = 1.0, 5
    settings = gateway_settings(own_upstream.url)
    settings["upstreams"]["fake"]["keep_warm"] = {"idle_s": idle_s, "max_per_hour": 1000}
    with GatewayProcess(settings, tmp_path, args=WORKERS) as gateway:
        both_up(gateway, ADMIN)
        ask_until_both_workers(gateway.url + "/v1/chat/completions", {"model": "chat"}, AS_APP)
        stats = own_upstream.stats
        before = stats.by_model["echo"]
        seen: list[float] = []  # when each ping reached the upstream, as near as the test sees it

        def pinged() -> bool:
            seen.extend(time.monotonic() for _ in range(stats.by_model["echo"] - before - len(seen)))
            return len(seen) >= pings

        wait_until(pinged, f"{pings} keep-warm pings", poll_s=0.01)
    # Each ping starts the idle spell again for every worker, so one gateway's pings are a spell apart at least;
    # two uncoordinated workers would each ping once a spell, fitting these into about half the time. A spell's
    # slack is for when the test saw the first and the last arrive.
    assert not_before(seen[pings - 1] - seen[0], (pings - 1) * idle_s, tolerance_s=idle_s), seen


def test_the_workers_share_one_simulated_region(tmp_path) -> None:
    # the region allows 6 requests a minute: one region for both workers lets 6 through in all, where a
    # region in each worker would let each worker's first 6 through
    rpm = 6
    settings = {"sim": {"rpm": rpm}, "cache": False, "journeys": {"log": None}}
    with GatewayProcess(settings, tmp_path, args=WORKERS) as gateway:
        both_up(gateway, {})
        models = httpx.get(gateway.url + "/v1/models").json()["data"]
        assert any("shared by the gateway's 2 workers" in str(m) for m in models), models
        body = {"model": "llama-3.1-8b", "max_tokens": 4}
        started = time.monotonic()
        # More than the region allows, and until both workers have sent some: a region in each worker would
        # then let more than `rpm` through.
        answers = ask_until_both_workers(gateway.url + "/v1/chat/completions", body, {}, least=rpm + 8)
        limited(answers, rpm, refills_since(started, rpm))


def test_a_keys_limits_are_counted_once_across_the_workers(own_upstream, tmp_path) -> None:
    rpm = 5
    settings = gateway_settings(own_upstream.url)
    settings["keys"][0]["rpm"] = rpm  # without Redis: the first worker keeps the buckets, the other asks it
    with GatewayProcess(settings, tmp_path, args=WORKERS) as gateway:
        both_up(gateway, ADMIN)
        started = time.monotonic()
        # Until both workers have answered (a busy machine can hand a dozen connections in a row to one), and
        # at least a dozen: five let in, every one after refused, whichever worker took it.
        answers = ask_until_both_workers(gateway.url + "/v1/chat/completions", {"model": "chat"}, AS_APP, least=12)
        limited(answers, rpm, refills_since(started, rpm))
        refused = next(a for a in answers if a.status_code == 429)
        assert refused.json()["error"]["code"] == "rate_limit_exceeded" and int(refused.headers["retry-after"]) >= 1


def worker_pids(gateway: GatewayProcess) -> dict[int, int]:
    """The gateway's workers by slot: the children holding a slot's lock open."""
    assert gateway.process is not None
    found: dict[int, int] = {}
    children = Path(f"/proc/{gateway.process.pid}/task/{gateway.process.pid}/children").read_text().split()
    for pid in map(int, children):
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                name = os.readlink(fd).rsplit("/", 1)[-1]
                if name.startswith("slot-") and name.endswith(".lock"):
                    found[int(name[len("slot-"):-len(".lock")])] = pid
    return found


def test_a_killed_worker_is_replaced_and_takes_its_slot_back(own_upstream, tmp_path) -> None:
    with GatewayProcess(gateway_settings(own_upstream.url), tmp_path, args=WORKERS) as gateway:
        both_up(gateway, ADMIN)
        for slot in (1, 0):  # a worker, then the one that keeps the keys' limits
            before = worker_pids(gateway)
            assert sorted(before) == [0, 1]
            os.kill(before[slot], signal.SIGKILL)

            def taken_again(slot: int = slot, gone: int = before[slot]) -> dict[int, int] | None:
                pids = worker_pids(gateway)
                return pids if pids.get(slot) not in (None, gone) else None

            now = wait_until(taken_again, f"slot {slot} taken again", poll_s=0.1)
            assert now[1 - slot] == before[1 - slot]  # the other worker served on
            both_up(gateway, ADMIN)
            answers = ask_until_both_workers(gateway.url + "/v1/chat/completions", {"model": "chat"}, AS_APP)
            assert all(a.status_code == 200 for a in answers)


def test_a_paraphrase_is_answered_by_any_worker_from_the_shared_cache_file(tmp_path) -> None:
    settings = {"journeys": {"log": None}}  # the offline default: the edge cache in SQLite, paraphrases on
    with GatewayProcess(settings, tmp_path, args=WORKERS) as gateway:
        both_up(gateway, {})
        url = gateway.url + "/v1/chat/completions"

        def asked(question: str, headers: dict[str, str] | None = None) -> httpx.Response:
            answer = httpx.post(url, json={"model": "llama-3.1-8b", "max_tokens": 8,
                                           "messages": [{"role": "user", "content": question}]},
                                headers=headers, timeout=30)
            assert answer.status_code == 200, answer.text
            return answer

        first = asked("How do I cook beans?")
        assert first.headers["x-firsttoken-cache"] == "miss"
        home = worker_of(first.headers["x-request-id"])

        def elsewhere(question: str, outcome: str) -> httpx.Response | None:
            """The other worker's answer from the cache, once it has one. The answer is in the file within
            0.2 s, and each worker reads the others' prompts every 0.5 s: until then a try is a miss, and keeps
            nothing (no-store), so that the next finds only what the first ask left."""
            answer = asked(question, {"cache-control": "no-store"})
            found = worker_of(answer.headers["x-request-id"]) != home and answer.headers["x-firsttoken-cache"]
            return answer if found and found.startswith(outcome) else None

        exact = wait_until(lambda: elsewhere("How do I cook beans?", "hit"), "the other worker's exact hit")
        assert exact.headers["x-firsttoken-cache"] == "hit"
        paraphrase = wait_until(lambda: elsewhere("What is the way to cook beans?", "semantic-hit"),
                                "the other worker's semantic hit")
        assert paraphrase.json()["choices"][0]["message"] == first.json()["choices"][0]["message"]
