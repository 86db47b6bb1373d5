"""Round trips as the kernel measures them: TCP_INFO's smoothed and minimum RTT of a socket.

The kernel samples the round trip of every TCP connection from the handshake and every ACK, for free.
Reading it costs one getsockopt. For the client's connection this answers "was it my wifi?"; for an
upstream connection it is the network round trip with no server time in it (a ping would add the
server's own scheduling, an HTTP probe its handler).
"""

from __future__ import annotations

import socket
import struct
import weakref
from dataclasses import dataclass
from typing import Any

# struct tcp_info (linux/tcp.h): 8 one-byte fields, then u32s; tcpi_rtt is the 16th u32 (offset 68),
# tcpi_rttvar the 17th; tcpi_min_rtt (kernel 4.6+) sits at offset 148, after four u64 rate counters and
# segs_out, segs_in, notsent_bytes.
_LENGTH = 152
_RTT = struct.Struct("=II")  # tcpi_rtt, tcpi_rttvar (µs)
_RTT_OFFSET = 68
_MIN_RTT = struct.Struct("=I")
_MIN_RTT_OFFSET = 148
_TCP_INFO = getattr(socket, "TCP_INFO", None)  # Linux only


@dataclass(frozen=True, slots=True)
class Rtt:
    smoothed_ms: float
    min_ms: float | None  # None on kernels that do not report it

    @property
    def best_ms(self) -> float:
        """The round trip with the least queueing and delayed-ACK noise in it."""
        return self.min_ms if self.min_ms else self.smoothed_ms


def rtt_of(sock: Any) -> Rtt | None:
    """The kernel's RTT for a TCP socket; None for anything else (a Unix socket, no TCP_INFO)."""
    if sock is None or _TCP_INFO is None:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _LENGTH)
    except (OSError, AttributeError, TypeError):
        return None
    if len(info) < _RTT_OFFSET + _RTT.size:
        return None
    smoothed, _variance = _RTT.unpack_from(info, _RTT_OFFSET)
    min_rtt = _MIN_RTT.unpack_from(info, _MIN_RTT_OFFSET)[0] if len(info) >= _MIN_RTT_OFFSET + 4 else 0
    if smoothed == 0:
        return None
    return Rtt(smoothed / 1000.0, min_rtt / 1000.0 if min_rtt and min_rtt != 0xFFFFFFFF else None)


def client_transport(receive: Any) -> Any:
    """The client's transport behind an ASGI `receive`. ASGI does not expose it; uvicorn's `receive` is a
    method of its per-request cycle, which holds the transport. Any other server gives None."""
    return getattr(getattr(receive, "__self__", None), "transport", None)


class RttReader:
    """A connection's RTT, read from the kernel at most once per `max_age_s`: the estimate moves slowly,
    and a getsockopt for every request on a kept-alive connection cost more than the rest of the X-ray.

    Connections are told apart by the transport itself, held weakly: an id can pass to the next
    connection once one closes, the reference then no longer leads to the same object. The table is
    bounded (cleared when full); `fresh=True` reads a new connection at once."""

    def __init__(self, max_age_s: float = 1.0, max_entries: int = 4096) -> None:
        self.max_age_s = max_age_s
        self.max_entries = max_entries
        self._read: dict[int, tuple[weakref.ref[Any], float, Rtt | None]] = {}

    def rtt(self, transport: Any, now: float, fresh: bool = False) -> Rtt | None:
        if transport is None:
            return None
        known = self._read.get(id(transport))
        if known is not None and known[0]() is transport and not fresh and now - known[1] < self.max_age_s:
            return known[2]
        rtt = rtt_of(transport.get_extra_info("socket"))
        if len(self._read) >= self.max_entries:
            self._read.clear()
        try:
            self._read[id(transport)] = (weakref.ref(transport), now, rtt)
        except TypeError:  # a transport that cannot be referenced weakly is read every time
            pass
        return rtt
