"""Slow and silent clients, over raw sockets against a real `firsttoken serve`: late headers and bodies get a
408 and lose their connection, waiting connections are bounded, and ordinary keep-alive is untouched."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import CLIENT_KEY, gateway_settings
from support.gateway_process import GatewayProcess
from support.openai_upstream import UpstreamThread
from support.waiting import PATIENCE_S, not_before, within

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.5
MAX_PENDING = 20
DRIP_S = 0.3  # a byte this often: each one would have reset uvicorn's keep-alive timer

CHAT = json.dumps({"model": "chat", "messages": [{"role": "user", "content": "hello"}]}).encode()


def chat_request(body: bytes = CHAT, length: int | None = None) -> bytes:
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
            b"authorization: Bearer " + CLIENT_KEY.encode() + b"\r\ncontent-length: %d\r\n\r\n" % (
                len(body) if length is None else length) + body)


HEALTHZ = b"GET /healthz HTTP/1.1\r\nhost: gateway\r\n\r\n"


@pytest.fixture(scope="module")
def gateway(upstream: UpstreamThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    settings = gateway_settings(upstream.url)
    settings["limits"].update(header_timeout_s=HEADER_TIMEOUT_S, body_timeout_s=BODY_TIMEOUT_S,
                              max_pending_connections=MAX_PENDING)
    workdir: Path = tmp_path_factory.mktemp("slow-clients")
    with GatewayProcess(settings, workdir) as process:
        yield process


@pytest.fixture(autouse=True)
def no_traceback(gateway: GatewayProcess) -> Iterator[None]:
    before = len(gateway.log())
    yield
    time.sleep(0.05)  # let the gateway write what it has to say
    said = gateway.log()[before:]
    assert "Traceback" not in said, said


def connect(gateway: GatewayProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=PATIENCE_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_until_closed(sock: socket.socket, within_s: float) -> bytes:
    """Everything the gateway sends until it closes the connection; fails if it is still open after `within_s`."""
    received = b""
    deadline = time.monotonic() + within_s
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk
    raise AssertionError(f"the connection was still open after {within_s} s; received {received!r}")


def drip(sock: socket.socket, data: bytes, within_s: float, since: float | None = None) -> tuple[bytes, float]:
    """Send `data` a byte every DRIP_S until the gateway answers or closes; what it sent, and when: seconds
    from `since` (a clock read before the gateway's started: before connecting, or sending the headers),
    or from now."""
    start = time.monotonic() if since is None else since
    for byte in data:
        if select.select([sock], [], [], 0)[0]:
            break
        try:
            sock.sendall(bytes([byte]))
        except OSError:  # closed under us: what it said before is still to be read
            break
        if select.select([sock], [], [], DRIP_S)[0]:
            break
        assert time.monotonic() - start < within_s, "the gateway kept listening to the drip"
    received = read_until_closed(sock, within_s - (time.monotonic() - start))
    return received, time.monotonic() - start


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response from a connection that stays open (content-length or chunked)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += _recv(sock)
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    if "content-length" in headers:
        while len(rest) < int(headers["content-length"]):
            rest += _recv(sock)
        return int(status_line.split()[1]), headers, rest
    body = b""
    while True:  # chunked
        while b"\r\n" not in rest:
            rest += _recv(sock)
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        while len(rest) < size + 2:
            rest += _recv(sock)
        body, rest = body + rest[:size], rest[size + 2:]
        if size == 0:
            return int(status_line.split()[1]), headers, body


def _recv(sock: socket.socket) -> bytes:
    sock.settimeout(PATIENCE_S)
    chunk = sock.recv(65536)
    assert chunk, "the gateway closed a connection that should have stayed open"
    return chunk


def assert_408(response: bytes) -> dict:
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), response
    assert b"connection: close" in head.lower()
    assert b"content-type: application/json" in head.lower()
    error = json.loads(body)["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "request_timeout"
    assert set(error) == {"message", "type", "param", "code"}
    return error


def test_slowloris_headers_get_408_after_the_header_timeout(gateway: GatewayProcess) -> None:
    opened = time.monotonic()  # a first request's clock starts when its connection opens
    with connect(gateway) as sock:
        response, after = drip(sock, chat_request(), within(HEADER_TIMEOUT_S), since=opened)
    error = assert_408(response)
    assert "headers" in error["message"] and "limits.header_timeout_s" in error["message"]
    assert not_before(after, HEADER_TIMEOUT_S)


def test_a_declared_body_that_never_comes_gets_408_after_the_body_timeout(gateway: GatewayProcess) -> None:
    with connect(gateway) as sock:
        sent = time.monotonic()  # before the headers that start the body's clock
        sock.sendall(chat_request(CHAT[:20], length=len(CHAT)))
        response = read_until_closed(sock, within(BODY_TIMEOUT_S))
        after = time.monotonic() - sent
    error = assert_408(response)
    assert "limits.body_timeout_s" in error["message"]
    assert not_before(after, BODY_TIMEOUT_S)


def test_a_body_dripped_a_byte_at_a_time_gets_408_after_the_body_timeout(gateway: GatewayProcess) -> None:
    with connect(gateway) as sock:
        sent = time.monotonic()  # before the headers that start the body's clock
        sock.sendall(chat_request(b"", length=len(CHAT)))
        response, after = drip(sock, CHAT, within(BODY_TIMEOUT_S), since=sent)
    assert_408(response)
    assert not_before(after, BODY_TIMEOUT_S)


def test_a_body_its_route_never_reads_cannot_hold_the_connection(gateway: GatewayProcess) -> None:
    """/healthz answers without reading a body; the body's drip must not keep the connection anyway."""
    with connect(gateway) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: gateway\r\ncontent-length: 1000\r\n\r\n")
        status, _, _ = read_response(sock)
        assert status == 200
        response, _ = drip(sock, b"x" * 1000, within(BODY_TIMEOUT_S))
    assert response == b""  # the answer was already given: the connection just ends


def test_past_max_pending_connections_the_longest_waiting_is_closed(gateway: GatewayProcess) -> None:
    idle = []  # keep-alive connections between requests: they wait for headers, but without a clock
    try:
        for _ in range(MAX_PENDING + 5):
            idle.append(sock := connect(gateway))
            sock.sendall(HEALTHZ)
            assert read_response(sock)[0] == 200
        # the five that waited longest made room; a new client still gets through, evicting the sixth
        newcomer = connect(gateway)
        idle.append(newcomer)
        newcomer.sendall(chat_request())
        status, _, body = read_response(newcomer)
        assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "echo: hello"
        fresh = [connect(gateway) for _ in range(3)]  # silent new connections count as waiting too
        closed, still_open = idle[:9], idle[9:]
        for sock in closed:  # closed like an expired keep-alive: nothing said
            assert read_until_closed(sock, PATIENCE_S) == b""
        assert select.select(still_open, [], [], 0.2)[0] == []
        newcomer.sendall(HEALTHZ)
        assert read_response(newcomer)[0] == 200
        for sock in fresh:
            sock.close()
    finally:
        for sock in idle:
            sock.close()


def test_keep_alive_reuse_waits_longer_than_the_header_timeout(gateway: GatewayProcess) -> None:
    """The header clock starts at a request's first byte: an idle keep-alive connection keeps uvicorn's
    (longer) keep-alive, and a request whose headers and body are split by short pauses still arrives."""
    with connect(gateway) as sock:
        for pause in (0.0, HEADER_TIMEOUT_S + 0.2, 0.1):  # idle: longer than the header timeout, then not
            time.sleep(pause)
            request = chat_request()
            sock.sendall(request[:30])
            for part in (request[30:-10], request[-10:]):  # each in a read of its own, the whole well in time
                time.sleep(HEADER_TIMEOUT_S / 10)
                sock.sendall(part)
            status, headers, body = read_response(sock)
            assert status == 200, body
            assert "close" not in headers.get("connection", "")
            assert json.loads(body)["choices"][0]["message"]["content"] == "echo: hello"


def test_unparseable_http_gets_uvicorns_plain_400(gateway: GatewayProcess) -> None:
    with connect(gateway) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        response = read_until_closed(sock, PATIENCE_S)
    assert response == (b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n"
                        b"content-length: 30\r\nconnection: close\r\n\r\nInvalid HTTP request received.")


def _with_headers(request: bytes, padding: int) -> bytes:
    """`request` with `padding` bytes more of headers, in 1 000-byte lines (as a cookie jar or a proxy's might)."""
    line, rest = request.split(b"\r\n", 1)
    extra = b"".join(b"x-padding-%d: %s\r\n" % (i, b"p" * 980) for i in range(padding // 1000))
    return line + b"\r\n" + extra + rest


@pytest.mark.parametrize("path, shape", [("/v1/chat/completions", "openai"), ("/v1/messages", "anthropic")])
def test_headers_past_the_bound_get_431_in_the_routes_own_format(gateway: GatewayProcess, path: str,
                                                                 shape: str) -> None:
    sock = connect(gateway)
    sock.sendall(_with_headers(chat_request().replace(b"/v1/chat/completions", path.encode()), 40_000))
    head, _, body = read_until_closed(sock, PATIENCE_S).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ") and b"connection: close" in head.lower(), head
    error = json.loads(body)
    if shape == "anthropic":
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
        assert "limits.max_header_bytes" in error["error"]["message"]
    else:
        assert error["error"]["code"] == "headers_too_large"
        assert "limits.max_header_bytes" in error["error"]["message"]


def test_headers_that_never_end_are_refused_once_past_the_bound(gateway: GatewayProcess) -> None:
    sock = connect(gateway)
    endless = _with_headers(HEALTHZ, 40_000).removesuffix(b"\r\n")  # the blank line that ends them never comes
    sock.sendall(endless)
    head, _, body = read_until_closed(sock, PATIENCE_S).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 "), head
    assert json.loads(body)["error"]["code"] == "headers_too_large"


def test_headers_under_the_bound_with_a_large_body_are_answered(gateway: GatewayProcess) -> None:
    """The bound is on the headers alone: a read that holds headers and much of a body is not counted whole."""
    long_chat = json.dumps({"model": "chat", "messages": [{"role": "user", "content": "y" * 50_000}]}).encode()
    sock = connect(gateway)
    sock.sendall(_with_headers(chat_request(long_chat), 20_000))
    status, _, body = read_response(sock)
    assert status == 200, body
    sock.sendall(chat_request())  # and the connection serves the next request
    assert read_response(sock)[0] == 200
