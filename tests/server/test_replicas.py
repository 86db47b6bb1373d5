"""Two replicas behind nginx, as deploy/ ships them, behave as one gateway: deploy/nginx.conf in front
(least connections, unbuffered), two `firsttoken serve --config deploy/config.yaml --workers 2`, one Redis.
A client key's rpm is counted once for both, a question either answered is a hit (and its paraphrase a
semantic hit) on the other, either replica lists every journey, and the two replicas' metrics add up to
the requests sent. Only the addresses differ from deploy/: loopback ports instead of container names."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from conftest import ADMIN, ADMIN_KEY, CLIENT_KEY
from support.gateway_process import GatewayProcess
from support.limits import refills_since
from support.nginx import NginxProcess, nginx_binary
from support.openai_upstream import UPSTREAM_KEY, UpstreamThread
from support.redis_server import RedisServer
from support.waiting import PATIENCE_S, wait_until

pytestmark = pytest.mark.skipif(nginx_binary() is None, reason="nginx is not installed (apt-get install nginx)")

DEPLOY_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "config.yaml"
RPM = 12  # the client key's requests a minute (FIRSTTOKEN_CLIENT_RPM), for both replicas together
MODEL = "primary/echo"
AS_APP = {"authorization": f"Bearer {CLIENT_KEY}"}
QUESTIONS = (f"question number {n} for the replicas" for n in itertools.count())


@dataclass
class Cluster:
    nginx: NginxProcess
    replicas: list[GatewayProcess]
    upstream: UpstreamThread


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("replicas")
    # The deployment's config as shipped, but for the semantic lookup's head start: the test's upstream answers
    # in a millisecond, sooner than any lookup, so a paraphrase is only served by a lookup decided before
    # its request leaves (tests/cache/test_miss_path.py races them).
    config = yaml.safe_load(DEPLOY_CONFIG.read_text())
    config["cache"]["semantic_wait_ms"] = PATIENCE_S * 1000
    deployed = root / "config.yaml"
    deployed.write_text(yaml.safe_dump(config))
    with ExitStack() as stack:
        upstream = stack.enter_context(UpstreamThread())
        redis = stack.enter_context(RedisServer(root))
        replicas = []
        for number in (1, 2):
            state = root / f"gateway-{number}"
            state.mkdir()
            env = {"UPSTREAM_URL": upstream.url, "UPSTREAM_API_KEY": UPSTREAM_KEY, "REDIS_URL": redis.url,
                   "FIRSTTOKEN_CLIENT_KEY": CLIENT_KEY, "FIRSTTOKEN_ADMIN_KEY": ADMIN_KEY,
                   "FIRSTTOKEN_CLIENT_RPM": str(RPM), "FIRSTTOKEN_STATE_DIR": str(state)}
            replicas.append(GatewayProcess(deployed, state, env=env,
                                           args=["--host", "127.0.0.1", "--workers", "2"]))
        with ThreadPoolExecutor(len(replicas)) as pool:  # both start at once: each waits on its own model load
            list(pool.map(stack.enter_context, replicas))
        for replica in replicas:
            both_workers_up(replica)
        nginx = stack.enter_context(NginxProcess([r.port for r in replicas], root))
        yield Cluster(nginx, replicas, upstream)


def both_workers_up(replica: GatewayProcess) -> None:
    wait_until(lambda: httpx.get(replica.url + "/metrics", headers=ADMIN).headers.get("x-firsttoken-workers")
               == "2/2", f"both workers of the replica on {replica.port}", poll_s=0.1)


def ask(url: str, question: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """One whole request, on a connection of its own: to nginx, or to a replica."""
    return httpx.post(url + "/v1/chat/completions", headers={**AS_APP, **(headers or {})}, timeout=30,
                      json={"model": MODEL, "messages": [{"role": "user", "content": question}]})


def served_by(cluster: Cluster, answer: httpx.Response) -> int:
    """Which replica answered a request: the one whose access log has its id."""
    request_id = answer.headers["x-request-id"]
    found = wait_until(lambda: [i for i, r in enumerate(cluster.replicas) if f"{request_id} POST" in r.log()],
                       f"a replica's access log line for {request_id}", poll_s=0.05)
    assert len(found) == 1, found
    return found[0]


def requests_answered(replica: GatewayProcess) -> float:
    """The requests this replica answered (all its workers), from its own /metrics."""
    scrape = httpx.get(replica.url + "/metrics", headers=ADMIN)
    assert scrape.headers["x-firsttoken-workers"] == "2/2"
    return sum(sample.value for family in text_string_to_metric_families(scrape.text)
               if family.name == "gen_ai_client_operation_duration_seconds"
               for sample in family.samples if sample.name.endswith("_count"))


def test_two_replicas_behind_nginx_behave_as_one_gateway(cluster: Cluster) -> None:
    upstream = cluster.upstream.stats
    sent: list[httpx.Response] = []
    started = time.monotonic()

    def from_other(question: str, outcome: str) -> httpx.Response | None:
        """The other replica's answer, once it is `outcome`. The first replica writes the answer to Redis,
        and then its prompt, after answering; each replica's workers follow the prompts. Until then a try is
        a miss (it went upstream), and keeps nothing (no-store), so the next finds only what the first left."""
        answer = ask(other.url, question, {"cache-control": "no-store"})
        sent.append(answer)
        return answer if answer.headers["x-firsttoken-cache"].startswith(outcome) else None

    # The edge cache: asked once upstream, whichever replica nginx picks for each repeat.
    question, through = next(QUESTIONS), cluster.nginx.url
    first = ask(through, question)
    assert first.status_code == 200, first.text
    assert first.headers["x-firsttoken-cache"] == "miss"
    sent.append(first)
    other = cluster.replicas[1 - served_by(cluster, first)]
    asked = upstream.by_model["echo"]
    wait_until(lambda: from_other(question, "hit"), "the other replica's hit", poll_s=0.2)
    repeats = [ask(through, question), ask(other.url, question), ask(through, question)]
    assert all(r.headers["x-firsttoken-cache"] == "hit" for r in repeats)
    sent += repeats
    paraphrase = wait_until(lambda: from_other(f"Please answer this: {question}", "semantic-hit"),
                            "the other replica's semantic hit", poll_s=0.2)
    assert paraphrase.json()["choices"][0]["message"] == first.json()["choices"][0]["message"]
    tries = sum(1 for r in sent if r.headers["x-firsttoken-cache"] == "miss") - 1  # the tries that came too soon
    assert upstream.by_model["echo"] == asked + tries  # no repeat reached the upstream

    # A stream crosses nginx unbuffered, read by the SDK chunk by chunk.
    client = openai.OpenAI(base_url=cluster.nginx.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    with client.chat.completions.with_streaming_response.create(
            model=MODEL, stream=True, messages=[{"role": "user", "content": "a few words through nginx"}]) as stream:
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream.parse() if chunk.choices)
        assert stream.headers["content-type"].startswith("text/event-stream")
        streamed = stream.headers["x-request-id"]
    assert text == "echo: a few words through nginx"

    # The client key's rpm, counted once in Redis for both replicas and their four workers: RPM let through
    # (the stream among them), then refused on either replica.
    while len(sent) < RPM + 5 or {served_by(cluster, r) for r in sent if r.status_code == 429} != {0, 1}:
        assert len(sent) < 4 * RPM, "nginx sent every refused request to one replica"
        sent.append(ask(through, next(QUESTIONS)))
    statuses = [r.status_code for r in sent]
    assert statuses[:RPM - 1] == [200] * (RPM - 1), statuses
    late = Counter(statuses[RPM - 1:])
    assert set(late) <= {200, 429} and late[200] <= refills_since(started, RPM), statuses
    by_replica = Counter((served_by(cluster, r), r.status_code) for r in sent)
    assert all(by_replica[(replica, 200)] and by_replica[(replica, 429)] for replica in (0, 1)), by_replica

    # Metrics: each replica counts what it answered (as its journey ends, a moment after the answer); the two
    # add up to every request sent.
    wait_until(lambda: sum(requests_answered(replica) for replica in cluster.replicas) >= len(sent) + 1,
               "every request counted")
    answered = [requests_answered(replica) for replica in cluster.replicas]
    assert all(count > 0 for count in answered), answered
    assert sum(answered) == len(sent) + 1, (answered, len(sent))

    # Journeys: either replica lists every request, whichever replica served it.
    ids = {streamed, *(r.headers["x-request-id"] for r in sent)}
    for replica in cluster.replicas:
        wait_until(lambda replica=replica: ids <= {j["request_id"] for j in httpx.get(
            replica.url + "/v1/journeys", params={"limit": 1000}, headers=ADMIN).json()["data"]},
                   f"every journey listed by the replica on {replica.port}")
        some = sorted(ids)[0]
        assert httpx.get(f"{replica.url}/v1/journeys/{some}", headers=AS_APP).status_code == 200
