"""What the routing benchmarks share: simulated regions (`firsttoken sim` processes) with known faults and
what they counted, and a client that sends streams (or whole requests) through the gateway and records each
one's outcome, route and time to first token."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import fixtures
import httpx
from gateway_overhead import ROOT, WORK, process
from wrk import CLIENT_KEY

MODEL = "llama-3.1-8b"


@dataclass(frozen=True)
class Outcome:
    ok: bool  # a whole answer, without an error event
    route: str  # x-firsttoken-route
    ttft_s: float  # to the first content (a whole answer: to the answer)


@dataclass(frozen=True)
class Region:
    """A `firsttoken sim` process: its port and process (to kill)."""

    name: str
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def requests(self) -> dict[str, int]:
        """What became of the requests that reached it: received, answered, refused, failed, abandoned."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/sim/stats", timeout=5) as reply:
            return json.loads(reply.read())["requests"]

    def faults(self, **changes: float | str) -> None:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/sim/faults", method="POST",
                                         data=json.dumps(changes).encode())
        urllib.request.urlopen(request, timeout=5).read()


@contextmanager
def region(name: str, *flags: str) -> Iterator[Region]:
    """`firsttoken sim --model llama-3.1-8b FLAGS` on a free loopback port."""
    port = fixtures.free_port()
    argv = [str(ROOT / ".venv" / "bin" / "python"), "-m", "firsttoken", "sim", "--port", str(port),
            "--model", MODEL, *flags]
    with process(argv, WORK / f"sim-{name}.log") as proc:
        fixtures.wait_for(f"http://127.0.0.1:{port}/v1/models")
        yield Region(name, port, proc)


async def send(url: str, requests: int, concurrency: int, stream: bool | None = True,
               model: str = "chat", max_tokens: int = 10) -> list[Outcome]:
    """`requests` requests, `concurrency` at a time, in order of sending; stream None alternates."""
    outcomes: list[Outcome | None] = [None] * requests
    queue = iter(range(requests))
    async with httpx.AsyncClient(base_url=url, timeout=30,
                                 headers={"authorization": f"Bearer {CLIENT_KEY}"}) as client:
        async def worker() -> None:
            for n in queue:
                streaming = (n % 2 == 0) if stream is None else stream
                body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": streaming,
                        "max_tokens": max_tokens, "ignore_eos": True}  # every answer max_tokens long
                started = time.perf_counter()
                first, ok = None, False
                async with client.stream("POST", "/v1/chat/completions", json=body) as reply:
                    route = reply.headers.get("x-firsttoken-route", "")
                    if not streaming:
                        answer = json.loads(await reply.aread())
                        ok = reply.status_code == 200 and bool(answer.get("choices"))
                        first = time.perf_counter() - started
                    else:
                        errored = False
                        async for line in reply.aiter_lines():
                            if line.startswith('data: {"error"'):
                                errored = True
                            elif first is None and line.startswith("data: {") and _content(line[6:]):
                                first = time.perf_counter() - started
                            elif line == "data: [DONE]":
                                ok = reply.status_code == 200 and not errored and first is not None
                outcomes[n] = Outcome(ok, route, first if first is not None else float("nan"))
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return [o for o in outcomes if o is not None]


def _content(payload: str) -> str:
    choices = json.loads(payload).get("choices") or [{}]
    return (choices[0].get("delta") or {}).get("content") or ""


def percentile(values: list[float], q: float) -> float:
    """Nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered))) - 1))]
