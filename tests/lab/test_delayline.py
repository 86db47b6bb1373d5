"""The delay line adds the round trip it promises, no less and not much more, and carries bulk data.

The client and server are small Python scripts run inside the line's namespaces with
``ip netns exec``; the client measures with perf_counter in its own process, so nothing in the
test process (pytest, the GIL) sits on the timed path.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    import firsttoken
except ModuleNotFoundError:  # a checkout whose package is not installed in the venv
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    import firsttoken

from firsttoken.lab.delayline import DelayLine, DelayLineError
from support.waiting import wait_until

pytestmark = pytest.mark.quiet  # measures the forwarder to the millisecond: not beside a loaded gateway

SAMPLES = 20
ATTEMPTS = 3
# The delay is a floor, and the forwarder may add a little of its own, but no more than this.
TOLERANCE = 0.02
# The forwarder is a process on a shared 2-core machine: when the other core is busy, its wake-ups
# come a few hundred µs late, which a 2 % bound on a 20 ms line cannot absorb.
JITTER_MS = 0.75
# With a CPU hog on each core, the four processes a round trip crosses (client, forwarder each way,
# server) each wait for a core: medians 2 to 4 ms above the line's (the forwarder's own stats show its
# share). The ceiling allows that much more; the errors it is there for (a delay applied twice, one
# direction's delay on both) cost 20 ms and more on these lines, and still fail. The floor stays exact.
BUSY_MS = 8.0

# Listens on the server address and prints the port. Per connection, the first byte picks the
# mode: "e" echoes until EOF, "b" sinks an 8-byte length then that many bytes and answers with
# their SHA-256; a connection closed straight away (connect timing) needs nothing.
SERVER = r"""
import hashlib, socket, struct, sys, threading

def recv_exact(conn, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)

def handle(conn):
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            mode = conn.recv(1)
            if mode == b"e":
                while data := conn.recv(65536):
                    conn.sendall(data)
            elif mode == b"b":
                (n,) = struct.unpack("!Q", recv_exact(conn, 8))
                digest, left = hashlib.sha256(), n
                while left:
                    chunk = conn.recv(min(left, 1 << 20))
                    if not chunk:
                        raise EOFError
                    digest.update(chunk)
                    left -= len(chunk)
                conn.sendall(digest.hexdigest().encode())
        except (EOFError, ConnectionError):
            pass

listener = socket.create_server((sys.argv[1], 0), backlog=64)
print(listener.getsockname()[1], flush=True)
while True:
    conn, _ = listener.accept()
    threading.Thread(target=handle, args=(conn,), daemon=True).start()
"""

# argv: host port mode n. Prints one JSON object.
#   connect: n fresh TCP connections, the time connect() takes for each (SYN -> SYN-ACK).
#   echo:    n round trips of a 16-byte message over one established connection.
#   bulk:    send n random bytes, compare the server's SHA-256 with our own.
CLIENT = r"""
import hashlib, json, os, socket, struct, sys, time

host, port, mode, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
addr = (host, port)
# One throwaway connection first: it pays for ARP resolution (another round trip through the
# line), which is not what we are measuring.
socket.create_connection(addr, timeout=10).close()

if mode == "connect":
    samples = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(10)
        t0 = time.perf_counter()
        s.connect(addr)
        samples.append((time.perf_counter() - t0) * 1000)
        s.close()
        # Let the FIN exchange of this connection cross the line before the next SYN, so each
        # sample is a handshake on a quiet line rather than one queued behind teardown frames.
        time.sleep(0.005)
    print(json.dumps({"samples_ms": samples}))
elif mode == "echo":
    s = socket.create_connection(addr, timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"e")
    message = b"0123456789abcdef"
    samples = []
    for i in range(n + 1):
        t0 = time.perf_counter()
        s.sendall(message)
        got = b""
        while len(got) < len(message):
            chunk = s.recv(len(message) - len(got))
            if not chunk:
                raise EOFError
            got += chunk
        assert got == message
        if i:  # the first exchange warms the connection up; keep the rest
            samples.append((time.perf_counter() - t0) * 1000)
    s.close()
    print(json.dumps({"samples_ms": samples}))
elif mode == "bulk":
    payload = os.urandom(n)
    s = socket.create_connection(addr, timeout=30)
    t0 = time.perf_counter()
    s.sendall(b"b" + struct.pack("!Q", n) + payload)
    answer = b""
    while len(answer) < 64:
        chunk = s.recv(64 - len(answer))
        if not chunk:
            break
        answer += chunk
    elapsed_ms = (time.perf_counter() - t0) * 1000
    s.close()
    ok = answer.decode() == hashlib.sha256(payload).hexdigest()
    print(json.dumps({"ok": ok, "elapsed_ms": elapsed_ms}))
"""


def _start_server(line: DelayLine) -> int:
    server = line.run_in(
        line.server_ns,
        [sys.executable, "-c", SERVER, line.server_ip],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    return int(server.stdout.readline())


def _client(line: DelayLine, port: int, mode: str, n: int) -> dict[str, Any]:
    result = line.run(
        line.client_ns,
        [sys.executable, "-c", CLIENT, line.server_ip, str(port), mode, str(n)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def _measure_round_trip(line: DelayLine, port: int, mode: str, what: str) -> float:
    """Median of SAMPLES round trips, checked against the line's rtt; returns the median.

    The floor is checked on every sample of every attempt: the forwarder must never release a
    frame early. The ceiling gets up to ATTEMPTS runs, because on a shared virtual machine a burst
    of steal time can shift a whole run by milliseconds; a line that really adds too much fails
    every attempt, so the retry does not hide a regression.
    """
    rtt_ms = line.rtt_ms
    ceiling = rtt_ms * (1 + TOLERANCE) + JITTER_MS + BUSY_MS
    medians: list[float] = []
    for _ in range(ATTEMPTS):
        samples: list[float] = _client(line, port, mode, SAMPLES)["samples_ms"]
        assert len(samples) == SAMPLES
        assert min(samples) >= rtt_ms, f"{what}: a round trip beat the delay: {min(samples):.3f} ms"
        median = statistics.median(samples)
        medians.append(median)
        print(f"{what}: median {median:.3f} ms (min {min(samples):.3f}, max {max(samples):.3f}), "
              f"forwarder late by {[d['lateness_p50_ms'] for d in line.stats().values()]} ms at the median")
        if median <= ceiling:
            return median
    pytest.fail(f"{what}: medians {[round(m, 3) for m in medians]} ms all above {ceiling:.3f} ms "
                f"({rtt_ms} ms + 2 % + {JITTER_MS} ms + {BUSY_MS} ms)")


@pytest.fixture(scope="module")
def available() -> None:
    reason = DelayLine.unavailable_reason()
    if reason is not None:
        pytest.skip(f"delay line unavailable: {reason}")


@pytest.fixture(scope="module")
def line150(available: None) -> Iterator[tuple[DelayLine, int]]:
    with DelayLine(rtt_ms=150) as line:
        yield line, _start_server(line)


def test_connect_time_is_one_rtt(line150: tuple[DelayLine, int]) -> None:
    line, port = line150
    _measure_round_trip(line, port, "connect", "connect @150")


def test_echo_round_trip_is_one_rtt(line150: tuple[DelayLine, int]) -> None:
    line, port = line150
    _measure_round_trip(line, port, "echo", "echo @150")


def test_bulk_transfer_crosses_intact(line150: tuple[DelayLine, int]) -> None:
    line, port = line150
    before = line.stats()
    result = _client(line, port, "bulk", 1 << 20)
    after = line.stats()
    print(f"bulk 1 MiB @150: {result['elapsed_ms']:.0f} ms, forwarder {after}")
    assert result["ok"], "server's digest differs from what was sent"
    # TCP would mask losses by retransmitting; frames must not be lost in the first place
    # (offloads off, buffers big enough).
    for direction in ("client-to-server", "server-to-client"):
        assert after[direction]["dropped"] == 0, direction
        # No super-frames: segmentation and receive offloads really are off.
        assert after[direction]["largest_frame"] <= line.mtu + 14, direction
    # 1 MiB in segments of at most MTU - 52 bytes of payload is more than 700 frames.
    assert after["client-to-server"]["received"] - before["client-to-server"]["received"] > 700
    # Bulk takes several round trips of slow start; it cannot beat the speed of "light".
    assert result["elapsed_ms"] >= 150.0


def test_short_line_is_accurate_too(available: None) -> None:
    with DelayLine(rtt_ms=20) as line:
        port = _start_server(line)
        _measure_round_trip(line, port, "connect", "connect @20")
        _measure_round_trip(line, port, "echo", "echo @20")


def test_asymmetric_delays_add_up(available: None) -> None:
    with DelayLine(client_to_server_ms=30, server_to_client_ms=10) as line:
        assert line.rtt_ms == 40
        port = _start_server(line)
        _measure_round_trip(line, port, "echo", "echo 30+10")


def test_close_removes_namespaces_and_processes(available: None) -> None:
    line = DelayLine(rtt_ms=0)
    with line:
        sleeper = line.run_in(line.server_ns, [sys.executable, "-c", "import time; time.sleep(60)"])
        namespaces = (line.client_ns, line.middle_ns, line.server_ns)
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert all(ns in listed for ns in namespaces)
    assert sleeper.poll() is not None
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns in namespaces)
    with pytest.raises(DelayLineError):
        line.run_in(line.client_ns, ["true"])


def test_stale_namespaces_of_a_killed_process_can_be_removed(available: None) -> None:
    # A process SIGKILLed with a line open cannot clean up; its forwarder must still exit (end of
    # stdin) and remove_stale() must find its namespaces.
    package_root = str(Path(firsttoken.__file__).resolve().parents[1])
    script = (
        "import os, sys; sys.path.insert(0, sys.argv[1]);"
        "from firsttoken.lab.delayline import DelayLine;"
        "line = DelayLine(rtt_ms=10); line.open();"
        "print(line.client_ns, line._forwarder.pid, flush=True); os.kill(os.getpid(), 9)"
    )
    child = subprocess.run([sys.executable, "-c", script, package_root], capture_output=True, text=True)
    client_ns, forwarder_pid = child.stdout.split()
    assert client_ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    removed = DelayLine.remove_stale()
    assert client_ns in removed and len([n for n in removed if n.startswith(client_ns[:-4])]) == 3
    wait_until(lambda: _exited(int(forwarder_pid)), "the forwarder of the killed process to exit")


def _exited(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie awaiting its new parent counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_names_are_unique_per_instance() -> None:
    # No root needed: names and addresses are decided at construction.
    a, b = DelayLine(rtt_ms=10), DelayLine(rtt_ms=10)
    assert len({a.client_ns, a.middle_ns, a.server_ns, b.client_ns, b.middle_ns, b.server_ns}) == 6
    assert a.client_ip != a.server_ip
    assert a.client_ip != b.client_ip


def test_delays_must_be_given_and_non_negative() -> None:
    with pytest.raises(ValueError):
        DelayLine()
    with pytest.raises(ValueError):
        DelayLine(client_to_server_ms=10)
    with pytest.raises(ValueError):
        DelayLine(rtt_ms=-1)
    line = DelayLine(rtt_ms=100, server_to_client_ms=20)
    assert (line.client_to_server_ms, line.server_to_client_ms, line.rtt_ms) == (50, 20, 70)
