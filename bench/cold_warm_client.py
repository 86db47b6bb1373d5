"""The measuring end of bench/cold_warm.py, run inside the delay line's client namespace.

    ip netns exec <client_ns> .venv/bin/python bench/cold_warm_client.py '<spec as JSON>'

A minimal HTTP/1.1 client on raw sockets (+ ssl), so that every phase of a request can be timed
with time.perf_counter: TCP connect, TLS handshake, request sent → first response byte, first
content token of a stream, last byte. It prints one JSON object on stdout.

Spec keys: op ("cold" | "warm" | "wait-tcp" | "wait-http"), host, port, path, ca (a CA file: use
TLS), stream, n, body, timeout_s.

- cold: a fresh TCP (+ TLS) connection per request, closed after it;
- warm: one connection opened (untimed, plus one untimed request when `prime` is set, to take the
  connection's first request out of the figures), then `n` timed requests on it;
- wait-tcp: connect until the port answers; wait-http: GET `path` until it answers 200.
"""

from __future__ import annotations

import json
import socket
import ssl
import sys
import time
from time import perf_counter
from typing import Any


class Connection:
    """One HTTP/1.1 connection; `connect_ms` / `tls_ms` say what opening it cost."""

    def __init__(self, host: str, port: int, ca: str | None, timeout_s: float) -> None:
        self.host, self.port = host, port
        t0 = perf_counter()
        sock = socket.create_connection((host, port), timeout=timeout_s)
        t1 = perf_counter()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.tls_version: str | None = None
        if ca:
            context = ssl.create_default_context(cafile=ca)
            sock = context.wrap_socket(sock, server_hostname=host)  # handshakes here
            self.tls_version = sock.version()
        t2 = perf_counter()
        self.sock: socket.socket = sock
        self.opened_at = t0
        self.connect_ms = (t1 - t0) * 1000.0
        self.tls_ms = (t2 - t1) * 1000.0 if ca else 0.0
        self.buf = b""

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- reading -----------------------------------------------------------------------------

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("connection closed by the peer mid-response")
        self.buf += data

    def _until(self, marker: bytes) -> bytes:
        while marker not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(marker)
        return head

    def _exact(self, count: int, feed: Any) -> None:
        while count > 0:
            if not self.buf:
                self._fill()
            piece, self.buf = self.buf[:count], self.buf[count:]
            count -= len(piece)
            feed(piece)

    # -- one request -------------------------------------------------------------------------

    def request(self, method: str, path: str, body: str | None = None, stream: bool = False) -> dict[str, Any]:
        payload = body.encode() if body is not None else b""
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}", "User-Agent: cold-warm-bench",
                 "Accept: " + ("text/event-stream" if stream else "application/json")]
        if body is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
        wire = ("\r\n".join(lines) + "\r\n\r\n").encode() + payload

        sent = perf_counter()
        self.sock.sendall(wire)
        if not self.buf:
            self._fill()
        first_byte = perf_counter()
        head = self._until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        status = int(head[0].split()[1])
        headers: dict[str, str] = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()

        detector = FirstToken() if stream else None
        first_token: list[float] = []
        chunks: list[bytes] = []

        def feed(piece: bytes) -> None:
            chunks.append(piece)
            if detector is not None and not first_token and detector.feed(piece):
                first_token.append(perf_counter())

        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int(self._until(b"\r\n").split(b";")[0], 16)
                if size == 0:
                    self._until(b"\r\n")  # no trailers from either server
                    break
                self._exact(size, feed)
                self._until(b"\r\n")
        else:
            self._exact(int(headers.get("content-length", "0")), feed)
        done = perf_counter()

        data = b"".join(chunks)
        if status != 200:
            raise RuntimeError(f"HTTP {status} from {self.host}:{self.port}{path}: {data[:500]!r}")
        if stream and not first_token:
            raise RuntimeError(f"no content token in the stream from {path}: {data[:500]!r}")
        return {
            "status": status,
            "sent_at": sent,
            "request_ms": (first_byte - sent) * 1000.0,  # request sent -> first response byte
            "first_byte_at": first_byte,
            "first_token_at": first_token[0] if first_token else None,
            "done_at": done,
            "bytes": len(data),
            "server_timing": headers.get("server-timing"),
            "upstream_connect_ms": _server_timing(headers.get("server-timing"), "connect"),
        }


class FirstToken:
    """Finds the first SSE event carrying non-empty `choices[0].delta.content`."""

    def __init__(self) -> None:
        self.pending = b""

    def feed(self, data: bytes) -> bool:
        self.pending += data.replace(b"\r\n", b"\n")
        while b"\n\n" in self.pending:
            event, _, self.pending = self.pending.partition(b"\n\n")
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue  # comments (heartbeats, server-timing), ids, event names
                value = line[5:].strip()
                if value == b"[DONE]":
                    continue
                try:
                    choices = json.loads(value).get("choices") or []
                except ValueError:
                    continue
                if choices and (choices[0].get("delta") or {}).get("content"):
                    return True
        return False


def _server_timing(value: str | None, metric: str) -> float | None:
    if not value:
        return None
    for part in value.split(","):
        name, *params = [p.strip() for p in part.split(";")]
        if name == metric:
            for param in params:
                if param.startswith("dur="):
                    return float(param[4:])
    return None


def sample(conn: Connection, result: dict[str, Any], start: float, cold: bool) -> dict[str, Any]:
    """One request's figures, all from `start` (connect start when cold, request sent when warm)."""
    ms = lambda t: None if t is None else (t - start) * 1000.0  # noqa: E731
    return {
        "tcp_connect_ms": conn.connect_ms if cold else None,
        "tls_handshake_ms": conn.tls_ms if cold and conn.tls_version else None,
        "tls_version": conn.tls_version,
        "request_ms": result["request_ms"],
        "ttfb_ms": ms(result["first_byte_at"]),
        "ttft_ms": ms(result["first_token_at"]),
        "total_ms": ms(result["done_at"]),
        "bytes": result["bytes"],
        "server_timing": result["server_timing"],
        "upstream_connect_ms": result["upstream_connect_ms"],
    }


def main() -> None:
    spec = json.loads(sys.argv[1])
    op, host, port = spec["op"], spec["host"], int(spec["port"])
    ca, timeout_s = spec.get("ca"), float(spec.get("timeout_s", 30.0))
    path, body, stream, n = spec.get("path", "/"), spec.get("body"), bool(spec.get("stream")), int(spec.get("n", 1))
    method = "POST" if body is not None else "GET"
    out: dict[str, Any] = {"op": op, "samples": []}

    if op in ("wait-tcp", "wait-http"):
        deadline = time.monotonic() + timeout_s
        last = "nothing tried"
        while time.monotonic() < deadline:
            try:
                conn = Connection(host, port, ca, 2.0)
                try:
                    if op == "wait-http":
                        conn.request("GET", path)
                finally:
                    conn.close()
                out["ok"] = True
                break
            except (OSError, RuntimeError, ValueError) as exc:
                last = f"{type(exc).__name__}: {exc}"
                time.sleep(0.1)
        else:
            out["ok"] = False
            out["error"] = last
    elif op == "cold":
        for _ in range(n):
            conn = Connection(host, port, ca, timeout_s)
            try:
                result = conn.request(method, path, body, stream)
            finally:
                conn.close()
            out["samples"].append(sample(conn, result, conn.opened_at, cold=True))
    elif op == "warm":
        conn = Connection(host, port, ca, timeout_s)
        try:
            out["opened"] = {"tcp_connect_ms": conn.connect_ms, "tls_handshake_ms": conn.tls_ms,
                             "tls_version": conn.tls_version}
            if spec.get("prime"):
                conn.request(method, path, body, stream)  # the connection's first request: not counted
            for _ in range(n):
                result = conn.request(method, path, body, stream)
                out["samples"].append(sample(conn, result, result["sent_at"], cold=False))
        finally:
            conn.close()
    else:
        raise SystemExit(f"unknown op {op!r}")
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
