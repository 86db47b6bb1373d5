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
from support.openai_upstream import UpstreamThread

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


def ask_until_both_workers(url: str, body: dict, headers: dict[str, str], most: int = 80) -> list[httpx.Response]:
    """At least six requests, and more until both workers have served some."""
    answers: list[httpx.Response] = []
    for number in range(most):
        answers.append(ask(url, body, headers, number))
        if workers_seen(answers) == 2 and len(answers) >= 6:
            return answers
    raise AssertionError(f"{most} connections all reached one worker")


def both_up(gateway: GatewayProcess, headers: dict[str, str]) -> GatewayProcess:
    """The gateway once both workers answer (the readiness wait saw one of them)."""
    deadline = time.monotonic() + 30
    while httpx.get(gateway.url + "/metrics", headers=headers).headers.get("x-firsttoken-workers") != "2/2":
        assert time.monotonic() < deadline, "the second worker never answered its sibling"
        time.sleep(0.1)
    return gateway


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
        logged = gateway.log()
        assert all(f"{request_id} POST /v1/chat/completions 200" in logged for request_id in ids)


def test_warm_connections_are_split_among_the_workers(own_upstream, tmp_path) -> None:
    with GatewayProcess(gateway_settings(own_upstream.url), tmp_path, args=WORKERS) as gateway:
        deadline = time.monotonic() + 10
        while len(own_upstream.stats.connections) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # a worker that warmed a set of its own would have opened it by now
        assert len(own_upstream.stats.connections) == 2  # `pool.warm: 2`: one each, not two each
        answers = ask_until_both_workers(gateway.url + "/v1/chat/completions", {"model": "chat"}, AS_APP)
        # each worker's first request found its warm connection: no handshake paid
        firsts = {}
        for answer in answers:
            firsts.setdefault(worker_of(answer.headers["x-request-id"]), answer)
        assert all("connect;dur=0.00" in a.headers["server-timing"] for a in firsts.values())


def test_keep_warm_pings_once_for_the_gateway_not_once_per_worker(own_upstream, tmp_path) -> None:
    settings = gateway_settings(own_upstream.url)
    settings["upstreams"]["fake"]["keep_warm"] = {"idle_s": 1.0, "max_per_hour": 1000}
    with GatewayProcess(settings, tmp_path, args=WORKERS) as gateway:
        both_up(gateway, ADMIN)
        ask_until_both_workers(gateway.url + "/v1/chat/completions", {"model": "chat"}, AS_APP)
        before = own_upstream.stats.by_model["echo"]
        time.sleep(3.4)  # idle: one gateway pings about every second, two uncoordinated workers twice as often
        pings = own_upstream.stats.by_model["echo"] - before
        assert 1 <= pings <= 4, pings


def test_the_workers_share_one_simulated_region(tmp_path) -> None:
    # the region allows 6 requests a minute: one region for both workers lets 6 through in all, where a
    # region in each worker would let each worker's first 6 through
    settings = {"sim": {"rpm": 6}, "cache": False, "journeys": {"log": None}}
    with GatewayProcess(settings, tmp_path, args=WORKERS) as gateway:
        both_up(gateway, {})
        models = httpx.get(gateway.url + "/v1/models").json()["data"]
        assert any("shared by the gateway's 2 workers" in str(m) for m in models), models
        body = {"model": "llama-3.1-8b", "max_tokens": 4}
        answers = [ask(gateway.url + "/v1/chat/completions", body, {}, number) for number in range(14)]
        statuses = Counter(a.status_code for a in answers)
        assert workers_seen(answers) == 2, statuses
        assert statuses[200] == 6, statuses


def test_a_keys_limits_are_counted_once_across_the_workers(own_upstream, tmp_path) -> None:
    settings = gateway_settings(own_upstream.url)
    settings["keys"][0]["rpm"] = 5  # without Redis: the first worker keeps the buckets, the other asks it
    with GatewayProcess(settings, tmp_path, args=WORKERS) as gateway:
        both_up(gateway, ADMIN)
        # Until both workers have answered (a busy machine can hand a dozen connections in a row to one), and
        # at least a dozen: five let in, every one after refused, whichever worker took it.
        answers = ask_until_both_workers(gateway.url + "/v1/chat/completions", {"model": "chat"}, AS_APP)
        answers += [ask(gateway.url + "/v1/chat/completions", {"model": "chat"}, AS_APP, 100 + number)
                    for number in range(12 - len(answers))]
        statuses = Counter(a.status_code for a in answers)
        assert workers_seen(answers) == 2, statuses
        assert statuses == {200: 5, 429: len(answers) - 5}, statuses
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
            deadline = time.monotonic() + 30
            while (now := worker_pids(gateway)).get(slot) in (None, before[slot]):
                assert time.monotonic() < deadline, f"slot {slot} was never taken again"
                time.sleep(0.1)
            assert now[1 - slot] == before[1 - slot]  # the other worker served on
            both_up(gateway, ADMIN)
            answers = ask_until_both_workers(gateway.url + "/v1/chat/completions", {"model": "chat"}, AS_APP)
            assert all(a.status_code == 200 for a in answers)


def test_a_paraphrase_is_answered_by_any_worker_from_the_shared_cache_file(tmp_path) -> None:
    settings = {"journeys": {"log": None}}  # the offline default: the edge cache in SQLite, paraphrases on
    with GatewayProcess(settings, tmp_path, args=WORKERS) as gateway:
        both_up(gateway, {})
        url = gateway.url + "/v1/chat/completions"

        def asked(question: str) -> httpx.Response:
            answer = httpx.post(url, json={"model": "llama-3.1-8b", "max_tokens": 8,
                                           "messages": [{"role": "user", "content": question}]}, timeout=30)
            assert answer.status_code == 200, answer.text
            return answer

        first = asked("How do I cook beans?")
        assert first.headers["x-firsttoken-cache"] == "miss"
        time.sleep(1.0)  # in the file within 0.2 s; each worker reads the others' prompts every 0.5 s
        elsewhere = {}
        for _ in range(40):  # fresh connections until each kind of repeat reached the other worker
            for kind, question in (("exact", "How do I cook beans?"), ("paraphrase", "What is the way to cook beans?")):
                answer = asked(question)
                if worker_of(answer.headers["x-request-id"]) != worker_of(first.headers["x-request-id"]):
                    elsewhere.setdefault(kind, answer)
            if len(elsewhere) == 2:
                break
        assert elsewhere["exact"].headers["x-firsttoken-cache"] == "hit"
        assert elsewhere["paraphrase"].headers["x-firsttoken-cache"].startswith("semantic-hit")
        assert elsewhere["paraphrase"].json()["choices"][0]["message"] == first.json()["choices"][0]["message"]
