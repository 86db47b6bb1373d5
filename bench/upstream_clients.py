"""The upstream HTTP client: aiohttp (the gateway's) against httpx and httpx2 over HTTP/1.1 and HTTP/2, httpcore
directly, and a floor (a bare uvloop protocol + httptools), in one single-process asyncio+uvloop client per run.

    .venv/bin/python bench/upstream_clients.py [--seconds 1] [--rounds 3] [--streams 250,1000] [--events 100]
        [--rate 10] [--short-clients ...] [--long-clients ...]

Needs nginx built with http_v2 (for h2c with prior knowledge), and h2 in the venv (httpx[http2]). About
5.5 minutes on 2 cores, 1.5 of them httpx closing 1000 streams (its pool's cost per request grows with it).

(a) Short requests against nginx's static answers (bench/fixtures.py): a POST of a small chat request
answered with a small JSON body, and one answered with a short SSE stream read chunk by chunk, at
concurrency 1 and 32; HTTP/1.1 clients on one port, HTTP/2 (h2c prior knowledge) on another. Each cell is
`--seconds` long, clients interleaved, `--rounds` rounds, medians: client CPU per request
(time.process_time) and requests/s.

(b) Many long streams: N streams opened at once by a fresh client, each of --events events at --rate
events/s, from a paced upstream in a subprocess (this file, --serve: HTTP/1.1 chunked and h2c on one
port, one tick timer for all streams). Each cell runs in its own process, so its RSS starts clean:
time to open all N, client CPU per stream opened and per event (in a steady window with every stream open,
and over the whole cell, opening and closing included), when the last stream ended, RSS per open stream,
TCP connections the client held, share of expected events delivered in the window, and the upstream's own
CPU (so a saturated upstream shows). A client that holds streams back (httpx over HTTP/2 keeps at most 100
on its one connection) is cut once the window is measured. A benchmark, run by hand; CI never runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from contextlib import ExitStack
from importlib.metadata import version
from pathlib import Path
from typing import Any, cast

import uvloop

sys.path.insert(0, str(Path(__file__).parent))
import fixtures  # noqa: E402

HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench-upstream-key"}
SHORT_CLIENTS = ["aiohttp", "httpx", "httpx-h2", "httpx2", "httpx2-h2", "httpcore", "floor"]
LONG_CLIENTS = ["aiohttp", "httpx", "httpx2", "httpx-h2", "httpx-h2-uncapped", "floor"]
H2_STREAM_CAP = 100  # what httpcore (and httpcore2) announce, and then also keep their own streams under
Sink = Callable[[bytes], None]


# --- the clients ------------------------------------------------------------------------------------------

class Client:
    """One way to talk to the upstream: a whole JSON answer, or a stream read chunk by chunk as relay.py does."""

    h2 = False

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def post(self, url: str, body: bytes) -> bytes:
        raise NotImplementedError

    async def stream(self, url: str, body: bytes, opened: Callable[[], None], sink: Sink) -> None:
        raise NotImplementedError


class AiohttpClient(Client):
    """As src/firsttoken/upstream/pool.py configures it (a plain TCPConnector: TimedConnector only adds work
    when a connection opens) and as server/egress.py's `_open` and relay.py use it."""

    async def start(self) -> None:
        import aiohttp

        connector = aiohttp.TCPConnector(limit=4096, limit_per_host=4096, keepalive_timeout=60.0, ttl_dns_cache=300,
                                         enable_cleanup_closed=True)
        self.session = aiohttp.ClientSession(
            connector=connector, auto_decompress=True, skip_auto_headers=("User-Agent",),
            timeout=aiohttp.ClientTimeout(total=None, connect=None, sock_connect=10.0, sock_read=None))

    async def close(self) -> None:
        await self.session.close()

    async def post(self, url: str, body: bytes) -> bytes:
        async with self.session.post(url, data=body, headers=HEADERS, allow_redirects=False) as response:
            data = await response.read()
            _check(response.status)
            return data

    async def stream(self, url: str, body: bytes, opened: Callable[[], None], sink: Sink) -> None:
        response = await self.session.post(url, data=body, headers=HEADERS, allow_redirects=False)
        try:
            _check(response.status)
            opened()
            while data := await response.content.readany():
                sink(data)
        finally:
            response.release()


class HttpxClient(Client):
    """httpx (or httpx2, its successor that openai and anthropic now use): no read timeouts (the gateway has
    its own deadlines; anyio cancel scopes per read would cost), aiter_bytes (decodes like auto_decompress)."""

    def __init__(self, module: str, h2: bool) -> None:
        self.module, self.h2 = module, h2

    async def start(self) -> None:
        httpx: Any = __import__(self.module)
        self.client = httpx.AsyncClient(
            http1=not self.h2, http2=self.h2, follow_redirects=False, trust_env=False,
            limits=httpx.Limits(max_connections=4096, max_keepalive_connections=4096, keepalive_expiry=60.0),
            timeout=httpx.Timeout(None, connect=10.0))

    async def close(self) -> None:
        await self.client.aclose()

    async def post(self, url: str, body: bytes) -> bytes:
        response = await self.client.post(url, content=body, headers=HEADERS)
        _check(response.status_code)
        return cast(bytes, response.content)

    async def stream(self, url: str, body: bytes, opened: Callable[[], None], sink: Sink) -> None:
        async with self.client.stream("POST", url, content=body, headers=HEADERS) as response:
            _check(response.status_code)
            opened()
            async for data in response.aiter_bytes():
                sink(data)


class HttpcoreClient(Client):
    """httpcore's pool alone: what httpx costs without its own layer (models, decoders, hooks)."""

    def __init__(self, h2: bool) -> None:
        self.h2 = h2

    async def start(self) -> None:
        import httpcore

        self.pool = httpcore.AsyncConnectionPool(max_connections=4096, max_keepalive_connections=4096,
                                                 keepalive_expiry=60.0, http1=not self.h2, http2=self.h2)

    async def close(self) -> None:
        await self.pool.aclose()

    def _headers(self, url: str, body: bytes) -> list[tuple[bytes, bytes]]:
        host = url.split("/", 3)[2].encode()  # httpcore adds no Host (h2 turns it into :authority)
        return [(b"Host", host), (b"Content-Length", b"%d" % len(body)),
                *((k.encode(), v.encode()) for k, v in HEADERS.items())]

    async def post(self, url: str, body: bytes) -> bytes:
        response = await self.pool.request("POST", url, headers=self._headers(url, body), content=body)
        _check(response.status)
        return cast(bytes, response.content)

    async def stream(self, url: str, body: bytes, opened: Callable[[], None], sink: Sink) -> None:
        async with self.pool.stream("POST", url, headers=self._headers(url, body), content=body) as response:
            _check(response.status)
            opened()
            async for data in response.aiter_stream():
                sink(data)


class _FloorConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection parsed by httptools; `read` is readany: whatever body has come."""

    def __init__(self) -> None:
        import httptools

        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.chunks: list[bytes] = []
        self.waiter: asyncio.Future[None] | None = None
        self.status = 0
        self.complete = self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._wake()

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def _wait(self) -> None:
        self.waiter = asyncio.get_running_loop().create_future()
        await self.waiter
        self.waiter = None

    async def head(self) -> int:
        while not self.status and not self.lost:
            await self._wait()
        return self.status

    async def read(self) -> bytes:
        while not self.chunks:
            if self.complete or self.lost:
                return b""
            await self._wait()
        data = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        self.chunks.clear()
        return data


class FloorClient(Client):
    """Not a library: the least a Python HTTP/1.1 client can cost on this loop (a pool of protocols, the
    request head built per request, one task wake-up per read as readany), the bound on any choice."""

    async def start(self) -> None:
        self.idle: dict[tuple[str, int], list[_FloorConnection]] = defaultdict(list)

    async def close(self) -> None:
        for conns in self.idle.values():
            for conn in conns:
                if conn.transport is not None:
                    conn.transport.close()

    async def _send(self, url: str, body: bytes) -> tuple[_FloorConnection, tuple[str, int]]:
        hostport, path = url.split("/", 3)[2], "/" + url.split("/", 3)[3]
        host, port = hostport.rsplit(":", 1)
        key = (host, int(port))
        idle = self.idle[key]
        while idle and idle[-1].lost:
            idle.pop()
        if idle:
            conn = idle.pop()
        else:
            _, proto = await asyncio.get_running_loop().create_connection(_FloorConnection, host, int(port))
            conn = cast(_FloorConnection, proto)
        conn.status, conn.complete = 0, False
        head = "".join([f"POST {path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Length: {len(body)}\r\n",
                        *(f"{k}: {v}\r\n" for k, v in HEADERS.items()), "\r\n"])
        assert conn.transport is not None
        conn.transport.write(head.encode() + body)
        return conn, key

    def _release(self, conn: _FloorConnection, key: tuple[str, int]) -> None:
        if conn.complete and not conn.lost and conn.parser.should_keep_alive():
            self.idle[key].append(conn)
        elif conn.transport is not None:
            conn.transport.close()

    async def post(self, url: str, body: bytes) -> bytes:
        conn, key = await self._send(url, body)
        _check(await conn.head())
        parts = []
        while data := await conn.read():
            parts.append(data)
        self._release(conn, key)
        return b"".join(parts)

    async def stream(self, url: str, body: bytes, opened: Callable[[], None], sink: Sink) -> None:
        conn, key = await self._send(url, body)
        try:
            _check(await conn.head())
            opened()
            while data := await conn.read():
                sink(data)
        finally:
            self._release(conn, key)


def _lift_httpcore_stream_cap(limit: int) -> None:
    """httpcore announces MAX_CONCURRENT_STREAMS 100 (for pushes) and then keeps its own streams on a
    connection under min(that, the server's), waiting on a semaphore: it never opens a second HTTP/2
    connection, so stream 101 to one origin waits for one of the first 100 to end. This is its
    `_send_connection_init` with the announced value raised: what a gateway would have to patch."""
    import h2.settings
    from httpcore._async import http2

    codes = h2.settings.SettingCodes

    class Uncapped(http2.AsyncHTTP2Connection):
        async def _send_connection_init(self, request: Any) -> None:
            self._h2_state.local_settings = h2.settings.Settings(client=True, initial_values={
                codes.ENABLE_PUSH: 0, codes.MAX_CONCURRENT_STREAMS: limit, codes.MAX_HEADER_LIST_SIZE: 65536})
            del self._h2_state.local_settings[codes.ENABLE_CONNECT_PROTOCOL]
            self._h2_state.initiate_connection()
            self._h2_state.increment_flow_control_window(2**24)
            await self._write_outgoing_data(request)

    http2.AsyncHTTP2Connection = Uncapped  # type: ignore[misc]  # connection.py imports it per connection


def make_client(name: str) -> Client:
    if name == "aiohttp":
        return AiohttpClient()
    if name in ("httpx", "httpx-h2", "httpx2", "httpx2-h2"):
        return HttpxClient(name.removesuffix("-h2"), h2=name.endswith("-h2"))
    if name == "httpx-h2-uncapped":
        # Not 100 000: httpcore takes and gives back its semaphore once per stream allowed, at every
        # connection's start (100 000 would cost each connection 0.8 s of CPU).
        _lift_httpcore_stream_cap(4096)
        return HttpxClient("httpx", h2=True)
    if name in ("httpcore", "httpcore-h2"):
        return HttpcoreClient(h2=name.endswith("-h2"))
    if name == "floor":
        return FloorClient()
    raise SystemExit(f"unknown client {name}")


class UpstreamError(Exception):
    pass


def _check(status: int) -> None:
    if status != 200:
        raise UpstreamError(f"HTTP {status}")


# --- the paced upstream (--serve) ----------------------------------------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_EVENT = (b'data: {"id":"chatcmpl-paced","object":"chat.completion.chunk","created":1700000000,"model":"paced",'
          b'"choices":[{"index":0,"delta":{"content":" token%d"},"finish_reason":null}]}\n\n')
_H1_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
_H2_HEAD = [(b":status", b"200"), (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:\s*(\d+)")


class Ticker:
    """One timer for every stream: each tick writes the next event of the streams due then, and flushes each
    HTTP/2 connection it wrote to once, so the upstream's cost grows with events, not with timers."""

    def __init__(self, events: int, rate: float, tick_s: float = 0.01) -> None:
        self.payloads = [_EVENT % i for i in range(events)] + [b"data: [DONE]\n\n"]
        self.chunks = [b"%x\r\n%s\r\n" % (len(p), p) for p in self.payloads]
        self.every = max(1, round(1.0 / rate / tick_s))
        self.tick_s = tick_s
        self.loop = asyncio.get_running_loop()
        self.start = self.loop.time()
        self.tick = 0
        self.due: dict[int, list[PacedStream]] = defaultdict(list)
        self.dirty: set[PacedConnection] = set()
        self.loop.call_at(self.start + tick_s, self.run)

    def add(self, stream: PacedStream) -> None:
        if stream.send_next(self):
            self.due[self.tick + self.every].append(stream)

    def run(self) -> None:
        target = int((self.loop.time() - self.start) / self.tick_s)
        while self.tick < target:
            self.tick += 1
            for stream in self.due.pop(self.tick, ()):
                if not stream.closed and stream.send_next(self):
                    self.due[self.tick + self.every].append(stream)
        for conn in self.dirty:
            conn.flush()
        self.dirty.clear()
        self.loop.call_at(self.start + (self.tick + 1) * self.tick_s, self.run)


class PacedStream:
    def __init__(self, conn: PacedConnection, stream_id: int = 0) -> None:
        self.conn, self.stream_id = conn, stream_id
        self.sent = 0
        self.closed = False

    def send_next(self, ticker: Ticker) -> bool:
        """Write the next event; False once the last is written."""
        last = self.sent == len(ticker.payloads) - 1
        if self.stream_id:
            self.conn.h2_send(self.stream_id, ticker.payloads[self.sent], last)
            ticker.dirty.add(self.conn)
        else:
            self.conn.h1_send(ticker.chunks[self.sent] + (b"0\r\n\r\n" if last else b""), last)
        self.sent += 1
        if last:
            self.closed = True
        return not last


class PacedConnection(asyncio.Protocol):
    """HTTP/1.1 (chunked, keep-alive) or, when the client opens with the HTTP/2 preface, h2c; every POST is
    answered with a paced SSE stream."""

    def __init__(self, ticker: Ticker) -> None:
        self.ticker = ticker
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.h2: Any = None
        self.mode = ""
        self.streaming: PacedStream | None = None
        self.streams: dict[int, PacedStream] = {}
        self.blocked: dict[int, list[tuple[bytes, bool]]] = {}  # waiting for flow-control window

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        for stream in [*self.streams.values(), *([self.streaming] if self.streaming else [])]:
            stream.closed = True

    def data_received(self, data: bytes) -> None:
        if self.h2 is not None:
            self.h2_received(data)
            return
        self.buf += data
        if not self.mode:
            if len(self.buf) < len(PREFACE) and PREFACE.startswith(self.buf):
                return
            self.mode = "h2" if self.buf.startswith(PREFACE) else "h1"
            if self.mode == "h2":
                self.h2_start()
                return
        self.h1_next()

    # HTTP/1.1
    def h1_next(self) -> None:
        while self.streaming is None and (end := self.buf.find(b"\r\n\r\n")) >= 0:
            match = _CONTENT_LENGTH.search(self.buf[:end].lower())
            whole = end + 4 + (int(match.group(1)) if match else 0)
            if len(self.buf) < whole:
                return
            self.buf = self.buf[whole:]
            assert self.transport is not None
            self.transport.write(_H1_HEAD)
            self.streaming = PacedStream(self)
            self.ticker.add(self.streaming)

    def h1_send(self, data: bytes, last: bool) -> None:
        if self.transport is not None:
            self.transport.write(data)
        if last:
            self.streaming = None
            self.h1_next()

    # HTTP/2
    def h2_start(self) -> None:
        import h2.config
        import h2.connection
        import h2.settings

        codes = h2.settings.SettingCodes
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        # h2's default would hold each client to 100 streams; real upstreams announce 100-1000 here
        self.h2.local_settings = h2.settings.Settings(client=False, initial_values={
            codes.MAX_CONCURRENT_STREAMS: 100_000, codes.MAX_HEADER_LIST_SIZE: 65536})
        self.h2.initiate_connection()
        data, self.buf = self.buf, b""
        self.h2_received(data)

    def h2_received(self, data: bytes) -> None:
        import h2.events
        import h2.exceptions

        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.flush()
            if self.transport is not None:
                self.transport.close()
            return
        for event in events:
            if isinstance(event, h2.events.DataReceived):
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):  # the request is whole: answer it
                self.h2.send_headers(event.stream_id, _H2_HEAD)
                stream = self.streams[event.stream_id] = PacedStream(self, event.stream_id)
                self.ticker.add(stream)
            elif isinstance(event, h2.events.WindowUpdated):
                for stream_id in list(self.blocked):
                    for payload, last in self.blocked.pop(stream_id):
                        self.h2_send(stream_id, payload, last)
            elif isinstance(event, h2.events.StreamReset):
                if (stream := self.streams.pop(event.stream_id, None)) is not None:
                    stream.closed = True
                self.blocked.pop(event.stream_id, None)
        self.flush()

    def h2_send(self, stream_id: int, payload: bytes, last: bool) -> None:
        if self.transport is None or stream_id not in self.streams:
            return
        if stream_id in self.blocked or self.h2.local_flow_control_window(stream_id) < len(payload):
            self.blocked.setdefault(stream_id, []).append((payload, last))
            return
        self.h2.send_data(stream_id, payload, end_stream=last)
        if last:
            del self.streams[stream_id]

    def flush(self) -> None:
        if self.transport is not None and (data := self.h2.data_to_send()):
            self.transport.write(data)


async def serve(port: int, events: int, rate: float) -> None:
    raise_fd_limit()
    loop = asyncio.get_running_loop()
    ticker = Ticker(events, rate)
    server = await loop.create_server(lambda: PacedConnection(ticker), "127.0.0.1", port, backlog=4096)
    await server.serve_forever()


# --- measuring ---------------------------------------------------------------------------------------------

def raise_fd_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def process_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def connections_to(port: int) -> int:
    """TCP connections this process holds to 127.0.0.1:port (the client's own sockets, not the system's)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    with open("/proc/self/net/tcp") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            if parts[3] == "01" and int(parts[2].split(":")[1], 16) == port and parts[9] in inodes:
                count += 1
    return count


async def short_cell(client: Client, url: str, body: bytes, concurrency: int, seconds: float,
                     stream: bool) -> dict[str, float]:
    count = errors = 0
    stop = False

    def ignore(_: bytes) -> None:
        pass

    def nothing() -> None:
        pass

    async def worker() -> None:
        nonlocal count, errors
        while not stop:
            try:
                if stream:
                    await client.stream(url, body, nothing, ignore)
                else:
                    await client.post(url, body)
                count += 1
            except Exception:
                errors += 1
                await asyncio.sleep(0.01)

    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    await asyncio.sleep(seconds)
    stop = True
    await asyncio.gather(*tasks)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"us_per_req": cpu / max(count, 1) * 1e6, "rps": count / wall, "errors": errors, "cpu_share": cpu / wall}


async def short_phase(clients: list[str], h1: str, h2: str, seconds: float, rounds: int) -> dict[str, Any]:
    made = {name: make_client(name) for name in clients}
    json_path = "/json/v1/chat/completions"
    for client in made.values():
        await client.start()
        for _ in range(300):  # one after another: one connection each, code paths hot
            await client.post((h2 if client.h2 else h1) + json_path, _short_body(False))
    results: dict[str, Any] = {}
    # httpcore's pool looks at every pooled connection (and polls each idle one) for every request: the
    # first cell is taken with one connection in each pool, the rest with the 32 that concurrency 32 opens.
    cells = [("json", 1, "1 pooled connection"), ("json", 1, "32 pooled"), ("json", 32, "32 pooled"),
             ("sse", 1, "32 pooled"), ("sse", 32, "32 pooled")]
    for kind, concurrency, pooled in cells:
        if pooled == "32 pooled" and not results.get("warmed"):
            for client in made.values():
                for _ in range(50):
                    await asyncio.gather(*(client.post((h2 if client.h2 else h1) + json_path, _short_body(False))
                                           for _ in range(32)))
            results["warmed"] = True
        body = _short_body(kind == "sse")
        cell: dict[str, list[dict[str, float]]] = defaultdict(list)
        for r in range(rounds):
            order = clients[r % len(clients):] + clients[:r % len(clients)]  # no client always first
            for name in order:
                client = made[name]
                url = (h2 if client.h2 else h1) + f"/{kind}/v1/chat/completions"
                cell[name].append(await short_cell(client, url, body, concurrency, seconds, kind == "sse"))
        label = f"{kind}, concurrency {concurrency}, {pooled}"
        rows = results[label] = {name: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
                                 for name, runs in cell.items()}
        print(f"  {label}: " + ", ".join(f"{n} {v['us_per_req']:.0f} µs {v['rps']:.0f}/s" for n, v in rows.items()),
              flush=True)
    results.pop("warmed", None)
    for client in made.values():
        await client.close()
    return results


def _short_body(stream: bool) -> bytes:
    return fixtures.request_body("bench", stream).encode()


async def long_cell(name: str, n: int, url: str, port: int, server_pid: int, events: int, rate: float,
                    open_deadline: float) -> dict[str, Any]:
    raise_fd_limit()
    client = make_client(name)
    await client.start()
    if client.h2:  # imported on the first HTTP/2 connection: not a cost of opening streams
        import h2.connection  # noqa: F401
        import httpcore._async.http2  # noqa: F401
    gc.collect()
    base_rss = rss_bytes()
    body = fixtures.request_body("paced", True).encode()
    state = {"opened": 0, "events": 0, "done": 0, "done_s": 0.0}
    open_times: list[float] = []
    errors: Counter[str] = Counter()
    all_open = asyncio.Event()
    t0 = time.perf_counter()

    def opened() -> None:
        state["opened"] += 1
        open_times.append(time.perf_counter() - t0)
        if state["opened"] == n:
            all_open.set()

    def sink(data: bytes) -> None:  # events never straddle reads here: each is written whole, far below an MSS
        state["events"] += data.count(b"\n\n")

    async def one() -> None:
        try:
            await client.stream(url, body, opened, sink)
            state["done"] += 1
            state["done_s"] = time.perf_counter() - t0
        except Exception as exc:
            errors[type(exc).__name__] += 1

    c0 = time.process_time()
    t0 = time.perf_counter()
    tasks = [asyncio.create_task(one()) for _ in range(n)]
    try:
        await asyncio.wait_for(all_open.wait(), open_deadline)
    except TimeoutError:
        pass
    open_s = time.perf_counter() - t0
    open_cpu = time.process_time() - c0
    n_open = state["opened"]
    # The steady window: every stream open, none finished yet (the first ends (events - 1) / rate after t0).
    await asyncio.sleep(0.5)
    window = min(4.0, t0 + (events - 1) / rate - 0.3 - time.perf_counter())
    e1, c1, w1, s1 = state["events"], time.process_time(), time.perf_counter(), process_cpu(server_pid)
    conns = connections_to(port)
    await asyncio.sleep(max(window, 0.2) / 2)
    rss = rss_bytes() - base_rss
    await asyncio.sleep(max(window, 0.2) / 2)
    e2, c2, w2, s2 = state["events"], time.process_time(), time.perf_counter(), process_cpu(server_pid)
    # Streams that never opened (a client holding them back) would take rounds of `events / rate` each: cut
    # there. Otherwise wait for every stream's end, which is where a pool's cost per request shows.
    wait = 0.0 if n_open < n else t0 + events / rate + open_deadline + 40 - w2
    done, pending = await asyncio.wait(tasks, timeout=max(wait, 0.01))
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    total_cpu, total_events = time.process_time() - c0, state["events"]
    await client.close()
    steady_events = e2 - e1
    open_times.sort()
    return {
        "client": name, "n": n, "opened": n_open, "open_s": open_s if n_open == n else None,
        "open_p50_s": open_times[len(open_times) // 2] if open_times else None,
        "open_cpu_us_per_stream": open_cpu / max(n_open, 1) * 1e6,
        "window_s": w2 - w1, "us_per_event": (c2 - c1) / max(steady_events, 1) * 1e6,
        "delivered": steady_events / max((w2 - w1) * n_open * rate, 1e-9),
        "client_cpu_share": (c2 - c1) / (w2 - w1), "server_cpu_share": (s2 - s1) / (w2 - w1),
        "us_per_event_whole": total_cpu / max(total_events, 1) * 1e6, "events": total_events,
        "completed": state["done"], "done_s": state["done_s"], "connections": conns,
        "rss_kib_per_stream": rss / max(n_open, 1) / 1024,
        "errors": dict(errors), "cancelled": len(pending),
    }


# --- the run ----------------------------------------------------------------------------------------------

def static_upstream_conf(work: str, h1_port: int, h2_port: int) -> str:
    """fixtures.upstream_nginx_conf with an h2c listener beside (nginx 1.22 speaks h2c only with prior knowledge,
    on a listener of its own) and each answer given only once the request body is read. `return` answers at
    once; over HTTP/2 nginx then resets the stream (RST_STREAM NO_ERROR, as RFC 9113 8.1 allows) while httpcore
    is still sending the body, and httpcore raises LocalProtocolError(StreamClosedError) instead of handing
    over the answer. Real upstreams read the prompt first, so the body is read here first too: `mirror` with
    its body reads it in the precontent phase, then a static lookup that misses hands over to the answer."""
    conf = fixtures.upstream_nginx_conf(work, h1_port)
    conf = conf.replace(f"listen 127.0.0.1:{h1_port} reuseport;",
                        f"listen 127.0.0.1:{h1_port} reuseport;\n    listen 127.0.0.1:{h2_port} http2;\n"
                        f"    location = /_drain {{ internal; return 204; }}")

    def read_first(match: re.Match[str]) -> str:
        path, ctype, body = match.groups()
        name = path.strip("/").replace("/", "_")
        return (f"location = {path} {{ mirror /_drain; mirror_request_body on; root /nonexistent; "
                f"log_not_found off; error_page 404 = @{name}; }}\n"
                f"    location @{name} {{ default_type {ctype}; return 200 '{body}'; }}")

    conf, count = re.subn(r"location = (/\S+/chat/completions) \{ default_type (\S+); return 200 '(.*?)'; \}",
                          read_first, conf, flags=re.S)
    assert count == 2, "fixtures.upstream_nginx_conf changed: update static_upstream_conf"
    return conf


def wait_port(port: int, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def versions() -> str:
    libs = ", ".join(f"{lib} {_version(lib)}" for lib in
                     ("aiohttp", "httpx", "httpcore", "httpx2", "httpcore2", "h2", "uvloop", "httptools"))
    nginx = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip().split("/")[-1]
    return (f"{platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, {libs}, "
            f"nginx {nginx}")


def _version(lib: str) -> str:
    try:
        return version(lib)
    except Exception:
        return "absent"


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}×" if base else "–"


def short_tables(results: dict[str, Any]) -> str:
    out = []
    for cell, rows in results.items():
        base = rows.get("aiohttp")
        out += [f"\n{cell}\n", "| client | CPU µs/req | × aiohttp | req/s | × aiohttp | client CPU share | errors |",
                "|---|---:|---:|---:|---:|---:|---:|"]
        for name, r in rows.items():
            cpu_x = _ratio(r["us_per_req"], base["us_per_req"]) if base else "–"
            rps_x = _ratio(r["rps"], base["rps"]) if base else "–"
            out.append(f"| {name} | {r['us_per_req']:.0f} | {cpu_x} | {r['rps']:.0f} | {rps_x}"
                       f" | {r['cpu_share']:.0%} | {r['errors']:.0f} |")
    return "\n".join(out)


def _errors(r: dict[str, Any]) -> str:
    parts = [f"{kind} {count}" for kind, count in r["errors"].items()]
    if r["cancelled"]:
        parts.append(f"{r['cancelled']} cut at the cell's end")
    return ", ".join(parts) or "–"


def long_tables(results: list[dict[str, Any]], rate: float) -> str:
    out = []
    for n in sorted({r["n"] for r in results}):
        rows = [r for r in results if r["n"] == n]
        base = next((r for r in rows if r["client"] == "aiohttp"), None)
        out += [f"\nN = {n} streams ({rate:g} events/s each)\n",
                "| client | open / N | all open (s) | open CPU µs/stream | CPU µs/event | × aiohttp | "
                "µs/event whole run | last done (s) | RSS KiB/stream | TCP conns | delivered | client CPU | "
                "upstream CPU | errors |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in rows:
            whole = r["opened"] == n  # else the open CPU and RSS are shared by streams still queued: not per stream
            open_s = f"{r['open_s']:.2f}" if whole else f"> {r['window_open_deadline']:g}"
            open_cpu = f"{r['open_cpu_us_per_stream']:.0f}" if whole else "–"
            rss = f"{r['rss_kib_per_stream']:.1f}" if whole else "–"
            done = f"{r['done_s']:.1f}" if r["completed"] == n else "–"
            per_event = _ratio(r["us_per_event"], base["us_per_event"]) if base else "–"
            out.append(
                f"| {r['client']} | {r['opened']}/{n} | {open_s} | {open_cpu} | {r['us_per_event']:.1f} | {per_event} "
                f"| {r['us_per_event_whole']:.1f} | {done} | {rss} | {r['connections']} | {r['delivered']:.0%} "
                f"| {r['client_cpu_share']:.0%} | {r['server_cpu_share']:.0%} | {_errors(r)} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one short-request cell")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", default="250,1000")
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--open-deadline", type=float, default=5.0, help="seconds a cell waits for all N to open")
    parser.add_argument("--short-clients", default=",".join(SHORT_CLIENTS))
    parser.add_argument("--long-clients", default=",".join(LONG_CLIENTS))
    parser.add_argument("--skip-short", action="store_true")
    parser.add_argument("--skip-long", action="store_true")
    # internal: the paced upstream, and one long-stream cell in its own process
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--long", nargs=5, metavar=("CLIENT", "N", "URL", "PORT", "PID"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.serve:
        uvloop.run(serve(args.serve, args.events, args.rate))
        return
    if args.long:
        name, n, url, port, pid = args.long
        result = uvloop.run(long_cell(name, int(n), url, int(port), int(pid), args.events, args.rate,
                                      args.open_deadline))
        print(json.dumps(result), flush=True)
        return

    if shutil.which("nginx") is None:
        raise SystemExit("needs nginx")
    print(f"Machine: {versions()}", flush=True)
    with ExitStack() as stack:
        work = stack.enter_context(tempfile.TemporaryDirectory(prefix="upstream-clients-"))
        h1_port, h2_port, paced_port = fixtures.free_port(), fixtures.free_port(), fixtures.free_port()
        Path(work, "nginx.conf").write_text(static_upstream_conf(work, h1_port, h2_port))
        nginx = subprocess.Popen(["nginx", "-p", work, "-c", f"{work}/nginx.conf", "-g", "daemon off;"])
        stack.callback(lambda: (nginx.terminate(), nginx.wait()))
        paced = subprocess.Popen([sys.executable, __file__, "--serve", str(paced_port), "--events", str(args.events),
                                  "--rate", str(args.rate)])
        stack.callback(lambda: (paced.terminate(), paced.wait()))
        wait_port(h1_port)
        wait_port(h2_port)
        wait_port(paced_port)

        if not args.skip_short:
            print(f"\n(a) short requests: {args.seconds:g} s cells, {args.rounds} rounds, medians", flush=True)
            short = uvloop.run(short_phase(args.short_clients.split(","), f"http://127.0.0.1:{h1_port}",
                                           f"http://127.0.0.1:{h2_port}", args.seconds, args.rounds))
            print(short_tables(short), flush=True)
        if not args.skip_long:
            print(f"\n(b) long streams: {args.events} events at {args.rate:g}/s each, a fresh client process per cell",
                  flush=True)
            results = []
            for n in (int(x) for x in args.streams.split(",")):
                for name in args.long_clients.split(","):
                    proc = subprocess.run(
                        [sys.executable, __file__, "--long", name, str(n), f"http://127.0.0.1:{paced_port}/v1/chat",
                         str(paced_port), str(paced.pid), "--events", str(args.events), "--rate", str(args.rate),
                         "--open-deadline", str(args.open_deadline)], capture_output=True, text=True)
                    if proc.returncode != 0:
                        print(f"  {name} N={n} failed: {proc.stderr[-2000:]}", flush=True)
                        continue
                    result = json.loads(proc.stdout.strip().splitlines()[-1])
                    result["window_open_deadline"] = args.open_deadline
                    print("  " + json.dumps(result), flush=True)
                    results.append(result)
            print(long_tables(results, args.rate), flush=True)


if __name__ == "__main__":
    main()
