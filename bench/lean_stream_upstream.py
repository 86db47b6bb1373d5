"""A lean scripted upstream for long streams: OpenAI chat completions that stream T tokens at R tokens/s.

    .venv/bin/python bench/lean_stream_upstream.py --port 8000 [--tokens 100] [--rate 10] [--tick-ms 5]

Each POST /v1/chat/completions is answered (HTTP/1.1, chunked, keep-alive) with one `chat.completion.chunk`
event per token, the first at once and then one every 1/R s, then a finish chunk ("stop"), a usage chunk
and `data: [DONE]`. A request's `max_tokens` overrides --tokens. Every token's content is the
time.monotonic() at which it was written, so a client on the same machine (CLOCK_MONOTONIC is shared by
its processes) can tell how long each token took to reach it, through whatever relays it. GET /v1/models
answers the gateway's warm-pool probes; GET /stats counts requests and the peak of streams open at once
(DELETE /stats starts counting again). A benchmark tool.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import time
from typing import cast

import uvloop

MODEL = "lean"
MODELS = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "bench"}]}).encode()
_HEAD = b'data: {"id":"chatcmpl-lean","object":"chat.completion.chunk","created":1700000000,"model":"lean","choices":'
_TOKEN = _HEAD + b'[{"index":0,"delta":{"content":"%.6f"},"finish_reason":null}]}\n\n'
_FIRST = _HEAD + b'[{"index":0,"delta":{"role":"assistant","content":"%.6f"},"finish_reason":null}]}\n\n'
_FINISH = _HEAD + b'[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
_USAGE = _HEAD + b'[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}\n\n'
_DONE = b"data: [DONE]\n\n"
_STREAM_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")


def chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def plain(status: str, body: bytes, close: bool = False) -> bytes:
    extra = b"Connection: close\r\n" if close else b""
    return (b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
            % (status.encode(), len(body), extra)) + body


class Stats:
    def __init__(self) -> None:
        self.chat_requests = 0
        self.open_streams = 0
        self.max_open = 0
        self.connections = 0

    def reset(self) -> None:
        """Start counting a new phase: requests from zero, the peak from the streams open now."""
        self.chat_requests, self.max_open = 0, self.open_streams

    def as_json(self) -> bytes:
        return json.dumps(vars(self)).encode()


class Stream:
    """One answer in progress: which token is next and when it is due."""

    __slots__ = ("conn", "left", "total", "next_at")

    def __init__(self, conn: Upstream, total: int, next_at: float) -> None:
        self.conn, self.total, self.left, self.next_at = conn, total, total, next_at


class Ticker:
    """Every stream's events, written by one loop that wakes each `tick` s and writes whatever is due.

    A sleep per stream would cost a timer and a coroutine resumption per token (20 000 a second at 2000
    streams × 10 tokens/s) and would make this upstream, not the relay under test, the bottleneck. Here one
    wake-up serves every stream due in that tick; streams wait in buckets by tick number, so a tick touches
    only what is due. An event's content is its real write time, so the tick only coarsens the schedule,
    never the latency a client measures.
    """

    def __init__(self, rate: float, tick: float, stats: Stats) -> None:
        self.interval, self.tick, self.stats = 1.0 / rate, tick, stats
        self.buckets: dict[int, list[Stream]] = {}

    def add(self, stream: Stream) -> None:
        self.buckets.setdefault(int(stream.next_at / self.tick), []).append(stream)

    async def run(self) -> None:
        done_through = int(time.monotonic() / self.tick)
        while True:
            await asyncio.sleep(self.tick)
            now_tick = int(time.monotonic() / self.tick)
            for number in range(done_through + 1, now_tick + 1):
                for stream in self.buckets.pop(number, ()):
                    self.step(stream)
            done_through = now_tick

    def step(self, stream: Stream) -> None:
        conn = stream.conn
        if conn.stream is not stream:  # the client went away
            return
        if stream.left > 0:
            conn.write(chunk(_TOKEN % time.monotonic()))
            stream.left -= 1
        else:
            usage = _USAGE % (5, stream.total, stream.total + 5)
            conn.write(chunk(_FINISH) + chunk(usage) + chunk(_DONE) + b"0\r\n\r\n")
            conn.finish()
            return
        stream.next_at += self.interval
        self.add(stream)


class Upstream(asyncio.Protocol):
    """One client connection: requests read in turn (keep-alive), one stream at a time."""

    def __init__(self, ticker: Ticker, tokens: int) -> None:
        self.ticker, self.tokens, self.stats = ticker, tokens, ticker.stats
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.stream: Stream | None = None
        self.close_after = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        sock = transport.get_extra_info("socket")
        if sock is not None:  # each event leaves when written, not held back for the previous one's ACK
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.stats.connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        if self.stream is not None:
            self.stats.open_streams -= 1
        self.stream = None
        self.transport = None

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.stream is None and self.transport is not None and self.request():
            pass

    def request(self) -> bool:
        """Answer the first whole request in the buffer; False when there is none yet."""
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return False
        head = self.buffer[:end].decode("latin-1").split("\r\n")
        method, target, _ = (head[0].split(" ") + ["", ""])[:3]
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}
        length = int(headers.get("content-length", "0"))
        if len(self.buffer) < end + 4 + length:
            return False
        body = self.buffer[end + 4:end + 4 + length]
        self.buffer = self.buffer[end + 4 + length:]
        self.close_after = headers.get("connection", "").lower() == "close"
        self.route(method, target.split("?", 1)[0], body)
        return True

    def route(self, method: str, path: str, body: bytes) -> None:
        if method == "GET" and path.endswith("/models"):
            self.reply(plain("200 OK", MODELS, self.close_after))
        elif method == "GET" and path == "/stats":
            self.reply(plain("200 OK", self.stats.as_json(), self.close_after))
        elif method == "DELETE" and path == "/stats":
            self.stats.reset()
            self.reply(plain("200 OK", self.stats.as_json(), self.close_after))
        elif method == "POST" and path.endswith("/chat/completions"):
            self.start(body)
        else:
            self.reply(plain("404 Not Found", b'{"error":{"message":"not found"}}', self.close_after))

    def reply(self, data: bytes) -> None:
        self.write(data)
        if self.close_after and self.transport is not None:
            self.transport.close()

    def start(self, body: bytes) -> None:
        try:
            tokens = int(json.loads(body).get("max_tokens") or self.tokens)
        except (ValueError, AttributeError):
            self.reply(plain("400 Bad Request", b'{"error":{"message":"body is not a JSON object"}}', True))
            return
        self.stats.chat_requests += 1
        self.stats.open_streams += 1
        self.stats.max_open = max(self.stats.max_open, self.stats.open_streams)
        now = time.monotonic()
        self.stream = stream = Stream(self, tokens, now + self.ticker.interval)
        self.write(_STREAM_HEAD + chunk(_FIRST % now))  # the first token at once, as the request's answer
        stream.left -= 1
        self.ticker.add(stream)

    def finish(self) -> None:
        self.stream = None
        self.stats.open_streams -= 1
        if self.close_after and self.transport is not None:
            self.transport.close()
        elif self.buffer:
            self.data_received(b"")  # a request that came early waits for the stream before it


def raise_fd_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def serve(port: int, tokens: int, rate: float, tick: float) -> None:
    ticker = Ticker(rate, tick, Stats())
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Upstream(ticker, tokens), "127.0.0.1", port, backlog=4096)
    async with server:
        await ticker.run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens", type=int, default=100, help="tokens per answer (a request's max_tokens wins)")
    parser.add_argument("--rate", type=float, default=10.0, help="tokens per second per stream")
    parser.add_argument("--tick-ms", type=float, default=5.0, help="how often the ticker writes what is due")
    args = parser.parse_args()
    raise_fd_limit()
    uvloop.run(serve(args.port, args.tokens, args.rate, args.tick_ms / 1000))


if __name__ == "__main__":
    main()
