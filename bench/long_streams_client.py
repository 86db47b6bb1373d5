"""The client of long_streams.py: N streaming chat completions held open at once, on raw uvloop protocols.

    .venv/bin/python bench/long_streams_client.py --url http://127.0.0.1:8000 --n 1000 [--tokens 100]
        [--ramp-s 2] [--deadline-s 17] [--model lean]

Opens the N streams evenly over --ramp-s, one connection each, and reads them to the end or to
--deadline-s from the first. Measured per stream: TTFT (request written → first token event) and, for
every token, its delivery latency (arrival − the time.monotonic() the lean upstream wrote into its
content). Prints `open K` once every stream should be open (ramp + 1 s; K: streams open then), then one
JSON line: TTFTs, latency percentiles, events read and errors by kind. A benchmark tool.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import resource
import time
from array import array
from collections import Counter
from typing import Any, cast
from urllib.parse import urlsplit

import uvloop

CLIENT_KEY = "sk-bench-client-key"  # as bench/wrk.py: the gateways under test check a client key
_CONTENT = re.compile(rb'"content"\s*:\s*"(\d+\.\d+)"')
_DONE = b"[DONE]"


class Shared:
    """What every stream of a run adds to: token latencies, in one flat array rather than per-stream lists."""

    def __init__(self, n: int) -> None:
        self.latencies = array("d")
        self.events = 0
        self.finished = 0
        self.n = n
        self.all_done = asyncio.Event()

    def finish(self) -> None:
        self.finished += 1
        if self.finished == self.n:
            self.all_done.set()


class StreamClient(asyncio.Protocol):
    """One streaming request on its own connection: HTTP/1.1 head, chunked (or close-delimited) body, SSE."""

    def __init__(self, request: bytes, shared: Shared) -> None:
        self.request, self.shared = request, shared
        self.transport: asyncio.Transport | None = None
        self.sent = self.ttft = -1.0
        self.status = 0
        self.tokens = 0
        self.done = self.ended = False
        self.error: str | None = None
        self.head = b""  # until the response head is whole
        self.chunked = False
        self.raw = b""  # chunked body not yet decoded
        self.chunk_left = 0
        self.skip_crlf = False
        self.sse = b""  # decoded body not yet split into events

    # --- transport events ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self.transport.write(self.request)
        self.sent = time.monotonic()

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()  # one arrival time for everything in this read
        if not self.status:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            data = self.head[end + 4:]
            self.read_head(self.head[:end])
            if self.ended:
                return
        self.read_body(data, now)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if not self.ended:
            cause = f": {type(exc).__name__}" if exc else ""
            self.end(None if self.done and not self.chunked else
                     f"closed before the last chunk{cause}" if self.done else f"closed before [DONE]{cause}")

    # --- parsing ------------------------------------------------------------------------------

    def read_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        self.status = int(lines[0].split(b" ", 2)[1])
        names = {line.partition(b":")[0].strip().lower(): line.partition(b":")[2].strip().lower()
                 for line in lines[1:]}
        self.chunked = b"chunked" in names.get(b"transfer-encoding", b"")
        if self.status != 200:
            self.end(f"HTTP {self.status}")

    def read_body(self, data: bytes, now: float) -> None:
        body = self.dechunk(data) if self.chunked else data
        if body:
            self.read_events(body, now)
        if self.chunked and self.chunk_left < 0:  # the last chunk came
            self.end(None if self.done else "ended without [DONE]")

    def dechunk(self, data: bytes) -> bytes:
        buf, out = self.raw + data, []
        while self.chunk_left >= 0:
            if self.chunk_left:
                out.append(buf[:self.chunk_left])
                taken = len(out[-1])
                self.chunk_left -= taken
                buf = buf[taken:]
                if self.chunk_left:
                    break
                self.skip_crlf = True
            if self.skip_crlf:
                if len(buf) < 2:
                    break
                buf, self.skip_crlf = buf[2:], False
            line_end = buf.find(b"\r\n")
            if line_end < 0:
                break
            size = int(buf[:line_end].split(b";", 1)[0], 16)
            buf = buf[line_end + 2:]
            self.chunk_left = size if size else -1  # -1: the body is over
        self.raw = buf
        return b"".join(out)

    def read_events(self, body: bytes, now: float) -> None:
        sse = self.sse + body
        if b"\r" in sse:  # some servers end SSE lines with CRLF
            sse = sse.replace(b"\r\n", b"\n")
        start = 0
        while (end := sse.find(b"\n\n", start)) >= 0:
            self.event(sse[start:end], now)
            start = end + 2
        self.sse = sse[start:]

    def event(self, event: bytes, now: float) -> None:
        if event.startswith(b"data: {") and b"\n" not in event:  # the usual shape, without splitting lines
            data = event[6:]
        else:
            lines = event.split(b"\n")
            if any(line.startswith(b"event:") and b"error" in line for line in lines):
                self.error = self.error or "error event"
            data = b"\n".join(line[5:].lstrip() for line in lines if line.startswith(b"data:"))
            if not data:  # a comment (a heartbeat)
                return
        self.shared.events += 1
        if data == _DONE:
            self.done = True
        elif match := _CONTENT.search(data):
            self.tokens += 1
            self.shared.latencies.append(now - float(match.group(1)))
            if self.ttft < 0:
                self.ttft = now - self.sent
        elif b'"error"' in data:
            self.error = self.error or "error event"

    # --- ending -------------------------------------------------------------------------------

    def end(self, error: str | None) -> None:
        if self.ended:
            return
        self.ended = True
        self.error = self.error or error
        if self.transport is not None:
            self.transport.close()
        self.shared.finish()

    def give_up(self) -> None:
        """The deadline passed with this stream unfinished."""
        what = "no response" if not self.status else "no first token" if self.ttft < 0 else "unfinished"
        self.ended = True
        self.error = self.error or f"deadline: {what}"
        if self.transport is not None:
            self.transport.abort()

    @property
    def open(self) -> bool:
        return self.sent >= 0 and not self.ended


def request(host: str, port: int, model: str, tokens: int, index: int) -> bytes:
    body = json.dumps({"model": model, "stream": True, "max_tokens": tokens,
                       "messages": [{"role": "user", "content": f"Stream {index}: count for me."}]}).encode()
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nAuthorization: Bearer {CLIENT_KEY}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def open_stream(host: str, port: int, stream: StreamClient) -> None:
    try:
        await asyncio.get_running_loop().create_connection(lambda: stream, host, port)
    except OSError as exc:
        stream.end(f"connect: {type(exc).__name__}")


async def ramp(host: str, port: int, streams: list[StreamClient], ramp_s: float) -> list[asyncio.Task[None]]:
    """Open the streams evenly over ramp_s, so that the connect burst is not what is measured."""
    loop, tasks = asyncio.get_running_loop(), []
    start = loop.time()
    for i, stream in enumerate(streams):
        delay = start + i * ramp_s / len(streams) - loop.time()
        if delay > 0.001:
            await asyncio.sleep(delay)
        tasks.append(loop.create_task(open_stream(host, port, stream)))
    return tasks


def percentiles(values: list[float] | array[float]) -> dict[str, float | None]:
    ordered = sorted(values)
    if not ordered:
        return {"p50": None, "p90": None, "p99": None, "p999": None, "max": None}

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "p999": at(0.999), "max": ordered[-1]}


async def run(url: str, n: int, tokens: int, model: str, ramp_s: float, deadline_s: float) -> dict[str, Any]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    shared = Shared(n)
    streams = [StreamClient(request(host, port, model, tokens, i), shared) for i in range(n)]
    loop = asyncio.get_running_loop()
    started = loop.time()
    loop.call_at(started + ramp_s + 1.0, lambda: print(f"open {sum(s.open for s in streams)}", flush=True))
    tasks = await ramp(host, port, streams, ramp_s)
    try:
        await asyncio.wait_for(shared.all_done.wait(), max(0.0, started + deadline_s - loop.time()))
    except TimeoutError:
        for stream in streams:
            if not stream.ended:
                stream.give_up()
    for task in tasks:
        task.cancel()
    return summary(streams, shared, loop.time() - started, tokens)


def summary(streams: list[StreamClient], shared: Shared, elapsed: float, tokens: int) -> dict[str, Any]:
    errors = Counter(s.error for s in streams if s.error)
    short = sum(1 for s in streams if not s.error and s.tokens != tokens)
    if short:
        errors["short answer"] = short
    return {"n": len(streams), "elapsed_s": elapsed, "events": shared.events,
            "tokens": len(shared.latencies), "completed": sum(1 for s in streams if s.done and not s.error),
            "ttft_s": [s.ttft for s in streams if s.ttft >= 0],
            "latency_s": percentiles(shared.latencies), "errors": dict(errors)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="base URL: http://127.0.0.1:PORT")
    parser.add_argument("--n", type=int, required=True, help="streams held open at once")
    parser.add_argument("--tokens", type=int, default=100, help="max_tokens asked for (the lean upstream obeys)")
    parser.add_argument("--model", default="lean")
    parser.add_argument("--ramp-s", type=float, default=2.0)
    parser.add_argument("--deadline-s", type=float, default=17.0, help="seconds from the first stream to give up")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    result = uvloop.run(run(args.url, args.n, args.tokens, args.model, args.ramp_s, args.deadline_s))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
