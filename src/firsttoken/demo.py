"""`firsttoken demo`: the first minute with firsttoken, scripted, on simulated regions on this machine.

Two simulated regions stand in for Virginia (aws:us-east-1) and Frankfurt (aws:eu-central-1), seen
from Lagos, and a gateway stands in front of them with its dashboard open. The tour sends real requests
through the gateway and, after each, says in one line what the user just saw and which part of the
journey firsttoken removed, reading the gateway's own journey of the request (GET /v1/journeys/{id}):
the same numbers the dashboard draws. Every process it starts is stopped when it ends, however it ends.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich.console import Console

MODEL = "llama-3.1-8b"
IDLE_UNLOAD_S = 4.0  # Virginia unloads its model after this long without a request: the cold start
KEEP_WARM_S = 2.0  # …and the gateway pings it after this long idle, from the first request on
STALL_S = 3.0  # Frankfurt's first tokens are this late: the hedge
HEDGE_AFTER_S = 0.4
BURST = 48  # streams at once, against a batch of MAX_BATCH: the GPU's queue
MAX_BATCH = 8  # Virginia's replica runs this many sequences at once (a busy, shared GPU)


@dataclass
class Step:
    title: str
    said: str  # what the user just saw, and what firsttoken removed
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass
class Tour:
    dashboard: str
    steps: list[Step] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _process(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child in its own process group, stopped (and its group with it) when the block ends."""
    with log.open("wb") as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield child
    finally:
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            if child.poll() is not None:
                break
            try:
                os.killpg(child.pid, sig)
            except ProcessLookupError:
                break
            try:
                child.wait(wait)
            except subprocess.TimeoutExpired:
                continue


def _wait_ready(url: str, child: subprocess.Popen[bytes], log: Path, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RuntimeError(f"{url} exited at start:\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {seconds:.0f} s:\n{log.read_text()[-2000:]}")


@contextmanager
def regions_and_gateway(work: Path, port: int) -> Iterator[tuple[str, list[int]]]:
    """Virginia and Frankfurt, and a gateway in Lagos in front of them: (the gateway's URL, every pid)."""
    python = [sys.executable, "-m", "firsttoken"]
    virginia, frankfurt = free_port(), free_port()
    with ExitStack() as stack:
        children = []
        (work / "virginia.yaml").write_text(yaml.safe_dump({"sim": {"max_batch": MAX_BATCH}}))
        for name, sim_port, extra in (("virginia", virginia, ["--region", "aws:us-east-1", "--config",
                                                              str(work / "virginia.yaml"),
                                                              "--idle-unload", str(IDLE_UNLOAD_S)]),
                                      ("frankfurt", frankfurt, ["--region", "aws:eu-central-1",
                                                                "--stall", f"1.0:{STALL_S}"])):
            log = work / f"{name}.log"
            child = stack.enter_context(_process([*python, "sim", "--port", str(sim_port), "--model", MODEL,
                                                  "--client-location", "lagos", *extra], log))
            children.append((f"http://127.0.0.1:{sim_port}/v1/models", child, log))
        config = {
            "location": "lagos",
            # Once a client has asked for it, the gateway pings Virginia's model before it would unload.
            "upstreams": {"virginia": {"url": f"http://127.0.0.1:{virginia}/v1", "region": "aws:us-east-1",
                                       "keep_warm": {"idle_s": KEEP_WARM_S}},
                          "frankfurt": {"url": f"http://127.0.0.1:{frankfurt}/v1", "region": "aws:eu-central-1"}},
            "models": {MODEL: [f"virginia/{MODEL}"], "raced": [f"frankfurt/{MODEL}", f"virginia/{MODEL}"]},
            "routing": {"ordered": ["raced"], "hedge": {"max_s": HEDGE_AFTER_S, "budget": 1.0}},
            # The tour shows a paraphrase served: its lookup may wait for the embedding model on a laptop
            # that is busy (by default a lookup waits at most 15 ms, and a miss goes upstream without it).
            "cache": {"path": str(work / "cache.db"), "semantic_wait_ms": 2000},
            "journeys": {"log": str(work / "journeys.db")},
            "spend": {"log": str(work / "spend.db")},
            "responses": {"store": None},
        }
        (work / "firsttoken.yaml").write_text(yaml.safe_dump(config))
        log = work / "gateway.log"
        gateway = stack.enter_context(_process([*python, "serve", "--config", str(work / "firsttoken.yaml"),
                                                "--port", str(port)], log))
        children.append((f"http://127.0.0.1:{port}/readyz", gateway, log))
        for url, child, child_log in children:
            _wait_ready(url, child, child_log)
        yield f"http://127.0.0.1:{port}", [child.pid for _, child, _ in children]


async def _stream(client: httpx.AsyncClient, model: str, question: str, max_tokens: int = 48) -> dict[str, Any]:
    """One streamed question; the gateway's journey of it."""
    body = {"model": model, "stream": True, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": question}]}
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{model}: HTTP {response.status_code}: {(await response.aread())[:300]!r}")
        async for _ in response.aiter_bytes():
            pass
        request_id = response.headers["x-request-id"]
    for _ in range(50):  # the journey is kept as the request ends
        journey = await client.get(f"/v1/journeys/{request_id}")
        if journey.status_code == 200:
            return dict(journey.json())
        await asyncio.sleep(0.02)
    raise RuntimeError(f"no journey for {request_id}")


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f} ms"


async def cold_start(client: httpx.AsyncClient) -> Step:
    await asyncio.sleep(IDLE_UNLOAD_S + 0.5)  # Virginia has been idle long enough to unload its model
    journey = await _stream(client, MODEL, "What does a submarine cable carry?")
    cold = journey["upstream_timing"].get("cold", 0.0)
    return Step("A cold start", f"The model in Virginia had been unloaded after {IDLE_UNLOAD_S:.0f} s without a "
                f"request: the first token took {_ms(journey['phases']['ttft'])}, {cold / 1000:.1f} s of it loading "
                f"the model back. From now on firsttoken pings it after {KEEP_WARM_S:.0f} s idle, before it "
                f"unloads (upstreams.virginia.keep_warm; left unset, it learns when a model unloads).",
                {"cold_ms": cold, "ttft_ms": journey["phases"]["ttft"], "request_id": journey["request_id"]})


async def warm(client: httpx.AsyncClient) -> Step:
    journey = await _stream(client, MODEL, "Why is the first token slow from Lagos?")
    p = journey["phases"]
    return Step("A warm request", f"First token in {_ms(p['ttft'])}: {_ms(p['rtt'])} of it the round trip to "
                f"Virginia, {_ms(p['queue+prefill'])} the GPU. The connection was already open, kept warm "
                f"across the ocean: no handshakes ({_ms(p['connect'])}) to pay.",
                {"ttft_ms": p["ttft"], "rtt_ms": p["rtt"], "connect_ms": p["connect"],
                 "queue_prefill_ms": p["queue+prefill"], "verdict": journey["verdict"],
                 "request_id": journey["request_id"]})


async def burst(client: httpx.AsyncClient) -> Step:
    journeys = await asyncio.gather(*(_stream(client, MODEL, f"Question {i} of a burst: what is prefill?", 40)
                                      for i in range(BURST)))
    queued = sorted(j["phases"]["queue+prefill"] or 0.0 for j in journeys)
    return Step(f"A burst of {BURST}", f"{BURST} requests at once against a GPU that batches {MAX_BATCH}: the "
                f"provider's queue and prefill went to {_ms(statistics.median(queued))} at the median and "
                f"{_ms(queued[-1])} at worst. firsttoken sees the queue in every journey and sends the next "
                f"requests to the upstream expected to answer first.",
                {"queue_prefill_median_ms": statistics.median(queued), "queue_prefill_max_ms": queued[-1]})


async def cached(client: httpx.AsyncClient) -> Step:
    journey = await _stream(client, MODEL, "Why is the first token slow from Lagos?")
    return Step("The same question again", f"Answered from the edge cache in {_ms(journey['phases']['e2e'])}, "
                f"streamed at once: the ocean, the queue and the generation all removed.",
                {"cache": journey["cache"], "e2e_ms": journey["phases"]["e2e"], "request_id": journey["request_id"]})


async def paraphrase(client: httpx.AsyncClient) -> Step:
    journey = await _stream(client, MODEL, "From Lagos, why is the first token so slow?")
    similarity = journey["cache"].rpartition("=")[2]
    return Step("In other words", f"A question asked before in other words (similarity {similarity}): "
                f"answered from the edge in {_ms(journey['phases']['e2e'])}. Guards check numbers, negations "
                f"and names before a paraphrase is served.", {"cache": journey["cache"],
                                                             "request_id": journey["request_id"]})


async def hedge(client: httpx.AsyncClient) -> Step:
    journey = await _stream(client, "raced", "Which region answers first?")
    won = journey["hedge"].startswith("hedge-of=")
    outcome = (f"firsttoken raced Virginia, which won: first token in {_ms(journey['phases']['ttft'])} instead of "
               f"over {STALL_S:.0f} s" if won else
               f"firsttoken raced Virginia, but Frankfurt still answered first ({journey['hedge'] or 'no hedge'}): "
               f"first token in {_ms(journey['phases']['ttft'])}")
    return Step("A hedge", f"Frankfurt was stalling ({STALL_S:.0f} s before its first token). After "
                f"{HEDGE_AFTER_S * 1000:.0f} ms {outcome}.",
                {"hedge": journey["hedge"], "route": journey["route"], "ttft_ms": journey["phases"]["ttft"],
                 "request_id": journey["request_id"]})


def distance(warm_step: Step, floor_ms: float | None, rtt_ms: float | None) -> Step:
    tax = rtt_ms - floor_ms if rtt_ms is not None and floor_ms is not None else None
    return Step("From Lagos to Virginia", f"A round trip of {_ms(rtt_ms)}: {_ms(floor_ms)} is the speed of light "
                f"in fibre along the great circle, which nothing removes; {_ms(tax)} is the route the cables take "
                f"and their congestion. firsttoken keeps the connection open so that you pay that round trip "
                f"once per request, never once per handshake.", {"floor_ms": floor_ms, "rtt_ms": rtt_ms,
                                                                  "verdict": warm_step.facts["verdict"]})


# What each step is doing while it runs (the cold start alone takes over ten seconds).
DOING = {cold_start: f"waiting {IDLE_UNLOAD_S:.0f} s for Virginia to unload its model, then asking it",
         warm: "asking Virginia again", burst: f"sending {BURST} requests at once",
         cached: "asking the same question again", paraphrase: "asking it in other words",
         hedge: "asking Frankfurt, which stalls"}


async def tour(url: str, show: Callable[[Step], Awaitable[None]],
               doing: Callable[[str], None] = lambda _: None) -> list[Step]:
    steps: list[Step] = []
    async with httpx.AsyncClient(base_url=url, timeout=60,
                                 limits=httpx.Limits(max_connections=BURST + 4)) as client:
        for make in (cold_start, warm, burst, cached, paraphrase, hedge):
            doing(DOING[make])
            step = await make(client)
            steps.append(step)
            await show(step)
        state = (await client.get("/dashboard/api/state")).json()
        virginia = next(u for u in state["upstreams"] if u["name"] == "virginia")
        step = distance(steps[1], virginia["floor_ms"], steps[1].facts["rtt_ms"])
        steps.append(step)
        await show(step)
    return steps


def run(port: int, pace: float, console: Console) -> Tour:
    """The whole tour; every process stopped at the end (also on an error or Ctrl-C)."""
    with tempfile.TemporaryDirectory(prefix="firsttoken-demo-") as directory:
        work = Path(directory)
        with ExitStack() as running:
            with console.status("Starting two simulated regions (Virginia, Frankfurt) and a gateway in Lagos…"):
                url, pids = running.enter_context(regions_and_gateway(work, port))
            result = Tour(f"{url}/dashboard", pids=pids)
            console.print(f"Watch it on the dashboard: [bold cyan]{result.dashboard}[/]")
            time.sleep(pace)

            shown = 0
            with console.status("", spinner="dots") as status:  # drawn on a terminal only

                async def show(step: Step) -> None:
                    nonlocal shown
                    shown += 1
                    console.print()
                    console.print(f"{shown}. {step.title}", style="bold", markup=False)
                    console.print(step.said, markup=False, highlight=False)
                    status.update("")
                    await asyncio.sleep(pace)

                result.steps = asyncio.run(tour(url, show, lambda words: status.update(f"{words}…")))
    return result
