"""Packet-level delay line: the "wire" that sits in the middle network namespace.

Run as its own process inside the middle namespace (``DelayLine`` does this for you)::

    ip netns exec MID python -m firsttoken.lab.forwarder \\
        --a mid-c --b mid-s --a-to-b-ms 75 --b-to-a-ms 75 --watch-stdin

Every Ethernet frame that arrives on interface A is re-sent on interface B after being held for
``--a-to-b-ms`` milliseconds, and likewise B to A. Because it works on raw frames (AF_PACKET),
everything crosses the delay exactly as it would cross a long cable: ARP, the TCP handshake,
TLS and data alike, with no kernel routing or NAT involved.

It is a separate process, rather than threads in the test, so that the test's own Python code
never holds the GIL the forwarder needs to release a frame on time.

Protocol on stdin/stdout (with ``--watch-stdin``), used by ``DelayLine``:
  * once the sockets are bound it prints ``ready`` on stdout;
  * each ``stats`` line read from stdin is answered with one JSON line of counters;
  * end of file on stdin (the parent closed the pipe, or died) makes it exit, so a crashed test
    never leaves a forwarder running.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
from collections import deque
from queue import SimpleQueue
from typing import Any

# From <linux/if_ether.h> and <linux/if_packet.h>; the socket module does not export them all.
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
# Kernel receive timestamps as struct timespec (<asm-generic/socket.h>; x86 and arm values).
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("@qq")
_ANCILLARY_SPACE = socket.CMSG_SPACE(_TIMESPEC.size)
# Root may exceed net.core.rmem_max/wmem_max with the *FORCE variants (<asm-generic/socket.h>).
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)

# Big enough for any frame even if an offload was left on by mistake: an oversized frame is then
# received whole and fails loudly on send (counted as dropped) instead of being truncated.
MAX_FRAME = 65536
# Kernel-side buffering for bursts while a receiving thread is waiting for the GIL. The frames
# spend their delay in our user-space queue, so this only has to absorb scheduling hiccups, but a
# TCP sender in slow start can emit a whole window back to back.
SOCKET_BUFFER_BYTES = 16 * 1024 * 1024

# How many recent frames the lateness percentiles in the stats cover.
LATENESS_WINDOW = 4096

# The stop marker for a sending thread's queue.
_STOP = None

# A sleeping thread wakes up late: on a virtual machine with idle CPUs we measured 0.1-0.2 ms
# typically and over 1 ms at times, which alone would break a 2 % accuracy promise on a 20 ms
# line. So a sending thread sleeps only until this long before the deadline and then spins
# (yielding the CPU and the GIL on every turn) for the rest.
SPIN_MARGIN_NS = 1_000_000
# prctl(PR_SET_TIMERSLACK): the kernel may otherwise defer our wake-ups by 50 us to batch them.
_PR_SET_TIMERSLACK = 29


def open_packet_socket(ifname: str) -> socket.socket:
    """A raw socket that sees every frame on ``ifname`` (and only there) and can send on it."""
    # Protocol 0 at creation means "receive nothing" until bind() names the protocol and the
    # interface, so no frame from another interface can slip in between socket() and bind().
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    for force, plain, size in (
        (SO_RCVBUFFORCE, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES),
        (SO_SNDBUFFORCE, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES),
    ):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, size)
        except OSError:
            # Without CAP_NET_ADMIN the plain option still gets up to the sysctl maximum.
            sock.setsockopt(socket.SOL_SOCKET, plain, size)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.bind((ifname, ETH_P_ALL))
    return sock


class Direction:
    """One direction of the wire: frames received on ``rx`` are sent on ``tx`` after ``delay_s``.

    A receiving thread stamps each frame with its absolute deadline (arrival + delay) and queues
    it; a sending thread sleeps until each deadline in turn and sends. Since the delay is the same
    for every frame, deadlines are non-decreasing in arrival order, so a FIFO queue keeps frames in
    order, and absolute deadlines mean sleep overshoot on one frame never accumulates into drift
    on the next.

    "Arrival" is the kernel's receive timestamp, not the moment our thread got round to reading
    the frame: waking a blocked Python thread costs a few hundred microseconds on a virtual
    machine, and with the kernel's timestamp that cost is absorbed by the delay instead of being
    added to it.
    """

    def __init__(self, name: str, rx: socket.socket, tx: socket.socket, delay_s: float) -> None:
        self.name = name
        self._rx = rx
        self._tx = tx
        self._delay_ns = round(delay_s * 1e9)
        self._queue: SimpleQueue[tuple[int, bytes] | None] = SimpleQueue()
        # Each counter has exactly one writing thread, so plain ints are safe under the GIL.
        self.received = 0
        self.sent = 0
        self.dropped = 0
        # Larger than MTU + Ethernet header means an offload is still on somewhere.
        self.largest_frame = 0
        # Recent release lateness (send time - deadline), for stats: how exact the line is.
        self._lateness_ns: deque[int] = deque(maxlen=LATENESS_WINDOW)
        self._threads = [
            threading.Thread(target=self._receive_loop, name=f"{name}-rx", daemon=True),
            threading.Thread(target=self._send_loop, name=f"{name}-tx", daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        # The receiving thread is a daemon blocked in recv(); it dies with the process. Frames
        # still in flight are discarded, as they would be when a cable is unplugged.
        self._queue.put(_STOP)

    def _receive_loop(self) -> None:
        recvmsg = self._rx.recvmsg
        put = self._queue.put
        monotonic_ns = time.monotonic_ns
        time_ns = time.time_ns
        unpack_timespec = _TIMESPEC.unpack_from
        delay_ns = self._delay_ns
        while True:
            frame, ancdata, _flags, address = recvmsg(MAX_FRAME, _ANCILLARY_SPACE)
            # address = (ifname, proto, pkttype, hatype, hwaddr). The socket also sees the frames
            # that *we* send on this interface for the other direction; forwarding those would
            # loop them back where they came from.
            if address[2] == PACKET_OUTGOING:
                continue
            # Wall clock first, monotonic second: the timestamp is wall-clock time and has to be
            # moved onto the monotonic clock the sending thread uses. If we are preempted between
            # the two reads, this order under-estimates the offset and so dates the frame later,
            # never earlier: the delay stays a floor. (The opposite order let a round trip beat
            # the delay by tens of microseconds.)
            wall = time_ns()
            now = monotonic_ns()
            arrival = now
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    seconds, nanoseconds = unpack_timespec(data)
                    # min(): a wall-clock step must not date a frame in the future either.
                    arrival = min(now, seconds * 1_000_000_000 + nanoseconds - (wall - now))
            put((arrival + delay_ns, frame))
            self.received += 1
            if len(frame) > self.largest_frame:
                self.largest_frame = len(frame)

    def _send_loop(self) -> None:
        get = self._queue.get
        send = self._tx.send
        monotonic_ns = time.monotonic_ns
        sleep = time.sleep
        yield_cpu = os.sched_yield
        record_lateness = self._lateness_ns.append
        while True:
            item = get()
            if item is _STOP:
                return
            deadline, frame = item
            # Coarse wait, then spin: see SPIN_MARGIN_NS. The loop also never sends before the
            # deadline, as the delay is meant to be a floor.
            while (remaining := deadline - monotonic_ns()) > 0:
                if remaining > SPIN_MARGIN_NS:
                    sleep((remaining - SPIN_MARGIN_NS) / 1e9)
                else:
                    yield_cpu()
            record_lateness(-remaining)
            try:
                send(frame)
                self.sent += 1
            except OSError:
                # ENOBUFS, EMSGSIZE (an offload left on), interface going down at teardown: a real
                # wire would lose the frame too, and TCP will retransmit. Count it so tests can
                # assert there were none.
                self.dropped += 1

    def stats(self) -> dict[str, Any]:
        # deque.copy() runs in C under the GIL, so the sending thread cannot append mid-copy.
        lateness = sorted(self._lateness_ns.copy())

        def percentile_ms(fraction: float) -> float:
            if not lateness:
                return 0.0
            return round(lateness[min(len(lateness) - 1, int(fraction * len(lateness)))] / 1e6, 3)

        return {
            "received": self.received,
            "sent": self.sent,
            "dropped": self.dropped,
            "queued": self._queue.qsize(),
            "largest_frame": self.largest_frame,
            "lateness_p50_ms": percentile_ms(0.5),
            "lateness_p99_ms": percentile_ms(0.99),
            "lateness_max_ms": percentile_ms(1.0),
        }


def _set_timer_slack_ns(slack_ns: int) -> None:
    """Best effort: without it wake-ups are merely a little later."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(slack_ns), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m firsttoken.lab.forwarder",
        description="Forward Ethernet frames between two interfaces, holding each for a delay.",
    )
    parser.add_argument("--a", required=True, help="first interface (e.g. the client side)")
    parser.add_argument("--b", required=True, help="second interface (e.g. the server side)")
    parser.add_argument("--a-to-b-ms", type=float, required=True, help="one-way delay from A to B")
    parser.add_argument("--b-to-a-ms", type=float, required=True, help="one-way delay from B to A")
    parser.add_argument(
        "--watch-stdin",
        action="store_true",
        help="answer 'stats' lines on stdin and exit at end of file (used by DelayLine)",
    )
    args = parser.parse_args(argv)
    if args.a_to_b_ms < 0 or args.b_to_a_ms < 0:
        parser.error("delays must be >= 0 ms")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)

    # The sending threads wake from sleep needing the GIL; while a receiving thread is busy in a
    # burst, the default 5 ms switch interval could make them wait that long. Half a millisecond
    # keeps release times well inside the accuracy we promise.
    sys.setswitchinterval(0.0005)
    _set_timer_slack_ns(1)

    def _terminate(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _terminate)

    sock_a = open_packet_socket(args.a)
    sock_b = open_packet_socket(args.b)
    directions = [
        Direction("a-to-b", sock_a, sock_b, args.a_to_b_ms / 1000.0),
        Direction("b-to-a", sock_b, sock_a, args.b_to_a_ms / 1000.0),
    ]
    for direction in directions:
        direction.start()

    def stats_line() -> str:
        return json.dumps({d.name: d.stats() for d in directions})

    print("ready", flush=True)
    try:
        if args.watch_stdin:
            for line in sys.stdin:
                if line.strip() == "stats":
                    print(stats_line(), flush=True)
        else:
            while True:
                signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        for direction in directions:
            direction.stop()
        print(f"forwarder exiting: {stats_line()}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
