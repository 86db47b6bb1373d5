"""A soak: mixed load against a running gateway for a while, its process watched through /metrics.

Clients ask on the three routes, whole and streamed, new questions and repeated ones (cache hits), and
misbehave as real ones do: streams cancelled after their first event, readers that take each event slowly,
and clients that ask for a long stream and never read it. Every answer a well-behaved client asked for must
come whole (none lost). Every few seconds the gateway's resident memory, open file descriptors and asyncio
tasks are sampled; the slope of each, per hour, is fitted over the second half of the run (the first half
warms the pools, caches and allocator). Once the load stops, the gateway is sampled until it has let go of
what the load held (or a patient while has passed). tests/server/test_soak.py runs it for a minute,
bench/soak.py for half an hour.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlparse

import httpx
from prometheus_client.parser import text_string_to_metric_families

from support.waiting import wait_until

WATCHED = {"process_resident_memory_bytes": "rss", "process_open_fds": "fds", "firsttoken_asyncio_tasks": "tasks",
           "firsttoken_event_loop_lag_worst_seconds": "lag"}
KINDS = ("whole", "stream", "repeat", "cancelled", "slow reader", "never reads")
ROUTES = ("chat", "messages", "responses")
LONG_PROMPT = " ".join(["word"] * 100_000)  # the echo model answers it back: more than the socket buffers hold
# What the gateway may still hold once the load has stopped, beyond what it held before it: its warm upstream
# connections and a few descriptors more, a few tasks.
FDS_LEFT = 8
TASKS_LEFT = 4


@dataclass
class Sample:
    at: float
    rss: float
    fds: float
    tasks: float
    lag: float  # the longest the event loop has been late so far, in seconds


@dataclass
class SoakResult:
    samples: list[Sample] = field(default_factory=list)
    asked: Counter[str] = field(default_factory=Counter)
    lost: list[str] = field(default_factory=list)  # well-behaved requests that did not come back whole
    before: Sample | None = None  # before the load
    settled: Sample | None = None  # after the load stopped and the gateway drained

    def slope_per_hour(self, name: str) -> float:
        """Least-squares slope of `name` over the second half of the run, per hour."""
        half = self.samples[len(self.samples) // 2:]
        xs = [s.at for s in half]
        ys = [getattr(s, name) for s in half]
        if len(half) < 3 or statistics.pvariance(xs) == 0:
            return 0.0
        return statistics.linear_regression(xs, ys).slope * 3600

    def report(self) -> str:
        first, last = self.samples[0], self.samples[-1]
        lines = [f"{sum(self.asked.values())} requests in {last.at - first.at:.0f} s: "
                 + ", ".join(f"{kind} {n}" for kind, n in sorted(self.asked.items())),
                 f"lost: {len(self.lost)}"]
        for name, unit, scale in (("rss", "MiB", 2**20), ("fds", "", 1), ("tasks", "", 1)):
            values = [getattr(s, name) / scale for s in self.samples]
            before, settled = (getattr(s, name) / scale if s else float("nan") for s in (self.before, self.settled))
            lines.append(f"{name}: before {before:.1f}{unit}, first {values[0]:.1f}{unit}, max {max(values):.1f}"
                         f"{unit}, last {values[-1]:.1f}{unit}, settled {settled:.1f}{unit}; "
                         f"slope {self.slope_per_hour(name) / scale:+.1f}{unit}/h over the second half")
        lines.append(f"event loop: late by {last.lag * 1000:.0f} ms at worst")
        return "\n".join(lines)


def sample(url: str, admin: dict[str, str], started: float) -> Sample:
    values: dict[str, float] = {}
    text = httpx.get(f"{url}/metrics", headers=admin, timeout=60).text
    for family in text_string_to_metric_families(text):
        if family.name in WATCHED:
            values[WATCHED[family.name]] = family.samples[0].value
    return Sample(time.monotonic() - started, values["rss"], values["fds"], values["tasks"], values["lag"])


class Soak:
    def __init__(self, url: str, client: dict[str, str], admin: dict[str, str], seconds: float,
                 clients: int = 8, every_s: float = 5.0, seed: int = 1) -> None:
        self.url = url
        self.client = client
        self.admin = admin
        self.seconds = seconds
        self.clients = clients
        self.every_s = every_s
        self.seed = seed
        self.result = SoakResult()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def run(self) -> SoakResult:
        started = time.monotonic()
        self.result.before = before = sample(self.url, self.admin, started)
        threads = [threading.Thread(target=self._client, args=(n,), daemon=True) for n in range(self.clients)]
        for thread in threads:
            thread.start()
        while time.monotonic() - started < self.seconds:
            self.result.samples.append(sample(self.url, self.admin, started))
            time.sleep(self.every_s)
        self._stop.set()
        for thread in threads:
            thread.join(30)

        def settled() -> bool:  # the last streams and never-readers let go
            self.result.settled = now = sample(self.url, self.admin, started)
            return now.fds <= before.fds + FDS_LEFT and now.tasks <= before.tasks + TASKS_LEFT

        # What never settles is the caller's to judge, from the last sample: a leak, reported as one.
        with contextlib.suppress(AssertionError):
            wait_until(settled, "the gateway to let go of what the load held", poll_s=0.5)
        return self.result

    def _client(self, n: int) -> None:
        rng = random.Random(self.seed * 1000 + n)
        with httpx.Client(base_url=self.url, headers=self.client, timeout=30) as http:
            asked = 0
            while not self._stop.is_set():
                kind = rng.choice(KINDS)
                route = rng.choice(ROUTES)
                question = (f"a question asked again, number {rng.randrange(20)}" if kind == "repeat"
                            else f"client {n} question {asked}")
                asked += 1
                try:
                    whole = self._ask(http, kind, route, question, rng)
                except (httpx.HTTPError, OSError) as exc:
                    whole = kind in ("cancelled", "never reads") or f"{type(exc).__name__}: {exc}"
                with self._lock:
                    self.result.asked[kind] += 1
                    if whole is not True:
                        self.result.lost.append(f"{kind} {route}: {whole}")

    def _ask(self, http: httpx.Client, kind: str, route: str, question: str, rng: random.Random) -> bool | str:
        """One request of `kind`; True when it went as such a client expects (whole, for the well-behaved)."""
        stream = kind not in ("whole", "repeat")
        path, body = request(route, question, stream, slow=kind == "slow reader")
        if kind == "never reads":
            return self._never_read(path, {**body, **long_body(route)})
        if not stream:
            response = http.post(path, json=body)
            return True if response.status_code == 200 and complete(route, response.text, False) else \
                f"{response.status_code} {response.text[:200]}"
        with http.stream("POST", path, json=body) as response:
            if response.status_code != 200:
                return f"{response.status_code} {response.read()[:200]!r}"
            text = ""
            for chunk in response.iter_text():
                text += chunk
                if kind == "cancelled":
                    return True  # leaves with the first bytes: the gateway must let its upstream go
                if kind == "slow reader":
                    time.sleep(rng.uniform(0.01, 0.05))
            return True if complete(route, text, True) else f"incomplete: {text[-200:]}"

    def _never_read(self, path: str, body: dict) -> bool:
        """Ask for a long stream, read nothing of it for a while, then go."""
        target = urlparse(self.url)
        payload = json.dumps(body).encode()
        head = (f"POST {path} HTTP/1.1\r\nhost: {target.hostname}\r\ncontent-type: application/json\r\n"
                f"authorization: {self.client['authorization']}\r\ncontent-length: {len(payload)}\r\n\r\n").encode()
        with socket.create_connection((target.hostname, target.port), timeout=10) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(head + payload)
            self._stop.wait(3)
        return True


def request(route: str, question: str, stream: bool, slow: bool = False) -> tuple[str, dict]:
    model = "slow" if slow else "chat"
    if route == "chat":
        return "/v1/chat/completions", {"model": model, "stream": stream,
                                        "messages": [{"role": "user", "content": question}]}
    if route == "messages":
        return "/v1/messages", {"model": model, "stream": stream, "max_tokens": 256,
                                "messages": [{"role": "user", "content": question}]}
    return "/v1/responses", {"model": model, "stream": stream, "input": question, "store": False}


def long_body(route: str) -> dict:
    if route == "responses":
        return {"input": LONG_PROMPT}
    return {"messages": [{"role": "user", "content": LONG_PROMPT}]}


def complete(route: str, text: str, stream: bool) -> bool:
    """Whether an answer came whole: its format's own end."""
    if not stream:
        answer = json.loads(text)
        if route == "chat":
            return bool(answer["choices"][0]["finish_reason"])
        if route == "messages":
            return answer["stop_reason"] is not None
        return answer["status"] == "completed"
    end = {"chat": "data: [DONE]", "messages": "event: message_stop", "responses": "event: response.completed"}
    return end[route] in text
