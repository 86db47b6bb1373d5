"""Emulate network distance between two network namespaces with a packet-level delay line.

    with DelayLine(rtt_ms=150) as line:
        server = line.run_in(line.server_ns, ["python", "server.py", line.server_ip])
        line.run(line.client_ns, ["python", "client.py", line.server_ip])

Topology (all three namespaces are created for, and deleted with, each instance)::

    client_ns                    middle_ns                      server_ns
    [client_if 10.R.0.1] ==veth== [mid-c  forwarder  mid-s] ==veth== [server_if 10.R.0.2]

The middle namespace has no addresses: it is a wire. A forwarder process there (see
``firsttoken.lab.forwarder``) re-sends every Ethernet frame from one side on the other after a
delay, so ARP, the TCP handshake, TLS and data all pay the same distance, the way they would on a
real long-haul path. The two ends share one /24 and see each other as on-link neighbours.

We use a user-space forwarder rather than ``tc netem`` because netem is not available on every
kernel we run on, and a delay line on raw frames behaves the same everywhere.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import firsttoken

__all__ = ["DelayLine", "DelayLineError"]


class DelayLineError(RuntimeError):
    """Setting up or talking to the delay line failed; the message carries the command's output."""


# Offloads that must be off on every veth. With checksum offload the sender leaves TCP/UDP
# checksums for "hardware" to fill in: the frame we read from the raw socket carries a partial
# checksum and the far end drops it once we re-send it. With TSO/GSO/GRO the stack hands us
# super-frames far larger than the MTU, which cannot be re-sent as single frames. Each feature is
# switched separately because ethtool refuses a whole -K command if one feature is fixed or
# unknown on this kernel.
_OFFLOADS = ("rx", "tx", "sg", "tso", "gso", "gro", "lro", "rx-gro-list", "tx-udp-segmentation")

# Interface names are per namespace (veths are created straight into their namespaces), so they
# can be fixed and readable; only the namespace names need to be unique.
_CLIENT_IF = "veth-c"
_SERVER_IF = "veth-s"
_MIDDLE_CLIENT_IF = "mid-c"
_MIDDLE_SERVER_IF = "mid-s"

_instance_counter = itertools.count()
# Lines still open at interpreter exit (a test that forgot ``with``, or an interrupted run) are
# torn down by the atexit hook, so they do not leave namespaces behind. Strong references on
# purpose: a line dropped without close() must still be found here.
_open_lines: set[DelayLine] = set()


def _run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise DelayLineError(
            f"command failed ({result.returncode}): {' '.join(argv)}\n{result.stderr.strip()}"
        )
    return result


class DelayLine:
    """Two network namespaces joined through a third that delays every frame.

    ``rtt_ms`` is the main knob: each direction is delayed by half of it, so any request/response
    exchange (a TCP handshake, a ping, an HTTP request) takes ``rtt_ms`` longer than it would on
    a direct link. The delay is a floor: the forwarder never releases a frame early, and adds a
    fraction of a millisecond of its own.

    For asymmetric paths give ``client_to_server_ms`` and ``server_to_client_ms`` (one-way delays)
    instead; either may also override its half of ``rtt_ms``.

    Requires root (or CAP_SYS_ADMIN + CAP_NET_ADMIN), ``ip`` and ``ethtool``; check
    :meth:`available` first and skip when it is False.
    """

    def __init__(
        self,
        rtt_ms: float | None = None,
        *,
        client_to_server_ms: float | None = None,
        server_to_client_ms: float | None = None,
        mtu: int = 1500,
        startup_timeout_s: float = 10.0,
    ) -> None:
        half = None if rtt_ms is None else rtt_ms / 2.0
        c2s = client_to_server_ms if client_to_server_ms is not None else half
        s2c = server_to_client_ms if server_to_client_ms is not None else half
        if c2s is None or s2c is None:
            raise ValueError("give rtt_ms, or both client_to_server_ms and server_to_client_ms")
        if c2s < 0 or s2c < 0:
            raise ValueError("delays must be >= 0 ms")
        if not 68 <= mtu <= 65535:
            raise ValueError("mtu must be between 68 (the IPv4 minimum) and 65535")
        self.client_to_server_ms: float = float(c2s)
        self.server_to_client_ms: float = float(s2c)
        self.mtu = mtu
        self._startup_timeout_s = startup_timeout_s

        # pid + counter: unique among concurrent test processes (pytest-xdist workers) and among
        # lines open at once in one process.
        serial = next(_instance_counter)
        tag = f"ftl-{os.getpid()}-{serial}"
        self.client_ns = f"{tag}-cli"
        self.middle_ns = f"{tag}-mid"
        self.server_ns = f"{tag}-srv"
        self.client_if = _CLIENT_IF
        self.server_if = _SERVER_IF

        # The addresses only exist inside our namespaces, so they cannot clash with the host;
        # varying the second octet anyway keeps captures and logs from two lines distinguishable.
        octet = 1 + (os.getpid() * 31 + serial) % 254
        self.prefix_len = 24
        self.client_ip = f"10.{octet}.0.1"
        self.server_ip = f"10.{octet}.0.2"

        self._namespaces_created: list[str] = []
        self._processes: list[subprocess.Popen[Any]] = []
        self._forwarder: subprocess.Popen[str] | None = None
        self._forwarder_log: IO[str] | None = None
        self._opened = False
        self._closed = False

    @property
    def rtt_ms(self) -> float:
        """The round-trip delay the line adds: the sum of both one-way delays."""
        return self.client_to_server_ms + self.server_to_client_ms

    # ----------------------------------------------------------------------------------------
    # Availability

    @staticmethod
    @functools.cache
    def unavailable_reason() -> str | None:
        """Why a DelayLine cannot be built here, or None if it can. Probed once per process."""
        if not sys.platform.startswith("linux"):
            return "network namespaces need Linux"
        if os.geteuid() != 0:
            return "creating network namespaces needs root"
        for tool in ("ip", "ethtool"):
            if shutil.which(tool) is None:
                return f"'{tool}' is not installed"
        # Permissions alone do not prove it works (containers without CAP_SYS_ADMIN, a read-only
        # /run, no veth module), so actually build and delete a namespace with a veth pair.
        probe = f"ftl-probe-{os.getpid()}"
        try:
            made = _run(["ip", "netns", "add", probe], check=False)
            if made.returncode != 0:
                return f"'ip netns add' failed: {made.stderr.strip()}"
            veth = _run(
                ["ip", "-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1"],
                check=False,
            )
            if veth.returncode != 0:
                return f"creating a veth pair failed: {veth.stderr.strip()}"
        finally:
            _run(["ip", "netns", "del", probe], check=False)
        return None

    @classmethod
    def available(cls) -> bool:
        """True when this process may build delay lines (root, working ``ip netns``, veth)."""
        return cls.unavailable_reason() is None

    @staticmethod
    def remove_stale() -> list[str]:
        """Delete namespaces left by DelayLines of processes that no longer exist.

        A process killed with SIGKILL cannot clean up (its forwarder does exit, on end of stdin).
        Namespaces of live processes, this one included, are left alone. Returns what was deleted.
        """
        listed = _run(["ip", "netns", "list"], check=False).stdout.split()
        removed = []
        for name in listed:
            parts = name.split("-")
            if len(parts) != 4 or parts[0] != "ftl" or not parts[1].isdigit():
                continue
            try:
                os.kill(int(parts[1]), 0)
                continue  # still running (or a recycled pid: leaving it is the safe mistake)
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
            if _run(["ip", "netns", "del", name], check=False).returncode == 0:
                removed.append(name)
        return removed

    # ----------------------------------------------------------------------------------------
    # Lifecycle

    def __enter__(self) -> DelayLine:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def open(self) -> None:
        """Build the namespaces, wire them up and start the forwarder."""
        if self._opened:
            raise DelayLineError("a DelayLine can only be opened once")
        self._opened = True
        _open_lines.add(self)
        try:
            self._build_topology()
            self._start_forwarder()
        except BaseException:
            # Half-built lines are torn down here, because __exit__ never runs when __enter__
            # raises.
            self.close()
            raise

    def close(self) -> None:
        """Stop every process we started and delete the namespaces. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        _open_lines.discard(self)
        for proc in reversed(self._processes):
            _stop_process(proc, process_group=True)
        if self._forwarder is not None:
            # Closing stdin is the forwarder's cue to exit; SIGTERM/SIGKILL are the fallbacks.
            _close_quietly(self._forwarder.stdin)
            _stop_process(self._forwarder, process_group=False, wait_first_s=2.0)
            _close_quietly(self._forwarder.stdout)
        _close_quietly(self._forwarder_log)
        # Deleting a namespace destroys the veths in it, so this is all the network cleanup.
        for ns in reversed(self._namespaces_created):
            _run(["ip", "netns", "del", ns], check=False)
        self._namespaces_created.clear()

    def _build_topology(self) -> None:
        for ns in (self.client_ns, self.middle_ns, self.server_ns):
            _run(["ip", "netns", "add", ns])
            self._namespaces_created.append(ns)
            # Loopback is down in a fresh namespace; plenty of software (and 'localhost' in test
            # servers) silently misbehaves without it.
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])

        # Create each veth end directly inside its namespace, so the interface names never exist
        # in the root namespace where parallel lines would collide.
        _run(["ip", "-n", self.client_ns, "link", "add", _CLIENT_IF, "type", "veth",
              "peer", "name", _MIDDLE_CLIENT_IF, "netns", self.middle_ns])  # fmt: skip
        _run(["ip", "-n", self.server_ns, "link", "add", _SERVER_IF, "type", "veth",
              "peer", "name", _MIDDLE_SERVER_IF, "netns", self.middle_ns])  # fmt: skip

        # The middle is a wire, not a host: without IPv6 it sends no router solicitations or DAD
        # probes of its own (which would be harmless, but are noise in captures and counters).
        _run(["ip", "netns", "exec", self.middle_ns,
              "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"], check=False)  # fmt: skip
        _run(["ip", "netns", "exec", self.middle_ns,
              "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"], check=False)  # fmt: skip

        ends = [
            (self.client_ns, _CLIENT_IF),
            (self.middle_ns, _MIDDLE_CLIENT_IF),
            (self.middle_ns, _MIDDLE_SERVER_IF),
            (self.server_ns, _SERVER_IF),
        ]
        for ns, dev in ends:
            # Same MTU on all four so no end emits a frame the next hop cannot carry.
            _run(["ip", "-n", ns, "link", "set", "dev", dev, "mtu", str(self.mtu)])
            self._disable_offloads(ns, dev)
        for dev in (_MIDDLE_CLIENT_IF, _MIDDLE_SERVER_IF):
            # Frames crossing the middle are addressed to the far end's MAC; promiscuous mode
            # guarantees the middle veths never filter them out before our raw socket sees them.
            _run(["ip", "-n", self.middle_ns, "link", "set", "dev", dev, "promisc", "on"])

        _run(["ip", "-n", self.client_ns, "addr", "add",
              f"{self.client_ip}/{self.prefix_len}", "dev", _CLIENT_IF])  # fmt: skip
        _run(["ip", "-n", self.server_ns, "addr", "add",
              f"{self.server_ip}/{self.prefix_len}", "dev", _SERVER_IF])  # fmt: skip
        for ns, dev in ends:
            _run(["ip", "-n", ns, "link", "set", "dev", dev, "up"])

    def _disable_offloads(self, ns: str, dev: str) -> None:
        for feature in _OFFLOADS:
            # A feature can be missing or fixed on some kernels; that is fine as long as it is off,
            # which we verify below for the ones that matter.
            _run(["ip", "netns", "exec", ns, "ethtool", "-K", dev, feature, "off"], check=False)
        shown = _run(["ip", "netns", "exec", ns, "ethtool", "-k", dev]).stdout
        still_on = [
            name
            for name in (
                "tx-checksumming",
                "rx-checksumming",
                "tcp-segmentation-offload",
                "generic-segmentation-offload",
                "generic-receive-offload",
                "large-receive-offload",
            )
            if f"{name}: on" in shown
        ]
        if still_on:
            raise DelayLineError(f"could not turn off {', '.join(still_on)} on {dev} in {ns}")

    def _start_forwarder(self) -> None:
        argv = [
            sys.executable, "-m", "firsttoken.lab.forwarder",
            "--a", _MIDDLE_CLIENT_IF, "--b", _MIDDLE_SERVER_IF,
            "--a-to-b-ms", repr(self.client_to_server_ms),
            "--b-to-a-ms", repr(self.server_to_client_ms),
            "--watch-stdin",
        ]  # fmt: skip
        # The forwarder must import this very package even when it is not installed (a checkout
        # run with PYTHONPATH=src, say), so hand it the directory we were imported from.
        package_root = str(Path(firsttoken.__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        # Its stderr goes to a file, not a pipe nobody reads, and is quoted if startup fails.
        self._forwarder_log = tempfile.TemporaryFile(mode="w+", prefix="ftl-forwarder-")
        self._forwarder = subprocess.Popen(
            self.exec_prefix(self.middle_ns) + argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._forwarder_log,
            text=True,
            bufsize=1,
            env=env,
        )
        line = self._read_forwarder_line(self._startup_timeout_s)
        if line != "ready":
            raise DelayLineError(f"forwarder did not start (said {line!r}): {self._forwarder_stderr()}")

    def _read_forwarder_line(self, timeout_s: float) -> str:
        proc = self._forwarder
        assert proc is not None and proc.stdout is not None
        # select() before readline() so a hung forwarder cannot hang the test. The forwarder only
        # writes whole lines in response to us, so a readable pipe means a full line is coming.
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            if not selector.select(timeout_s):
                raise DelayLineError(f"forwarder silent for {timeout_s} s: {self._forwarder_stderr()}")
        return proc.stdout.readline().strip()

    def _forwarder_stderr(self) -> str:
        if self._forwarder_log is None:
            return ""
        self._forwarder_log.seek(0)
        return self._forwarder_log.read().strip()

    # ----------------------------------------------------------------------------------------
    # Using the line

    def stats(self) -> dict[str, dict[str, Any]]:
        """Forwarder counters per direction ("client-to-server", "server-to-client").

        Each has received, sent, dropped, queued (frames in flight), largest_frame (bytes,
        Ethernet header included) and lateness_p50_ms / lateness_p99_ms / lateness_max_ms: how
        long after their deadline recent frames were released (the forwarder's own contribution
        to the delay).
        """
        proc = self._forwarder
        if proc is None or proc.stdin is None or proc.poll() is not None:
            raise DelayLineError("the forwarder is not running")
        proc.stdin.write("stats\n")
        proc.stdin.flush()
        raw = json.loads(self._read_forwarder_line(5.0))
        return {"client-to-server": raw["a-to-b"], "server-to-client": raw["b-to-a"]}

    @staticmethod
    def exec_prefix(ns: str) -> list[str]:
        """The argv prefix that runs a command inside namespace ``ns``."""
        return ["ip", "netns", "exec", ns]

    def run_in(self, ns: str, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside namespace ``ns``; it is killed when the line closes.

        Keyword arguments go to :class:`subprocess.Popen`. The process gets its own process group
        (unless you pass ``start_new_session``/``process_group``) so that cleanup also reaches
        any children it spawns.
        """
        self._require_open()
        if "start_new_session" not in popen_kwargs and "process_group" not in popen_kwargs:
            popen_kwargs["start_new_session"] = True
        # 'ip netns exec' exec()s the command, so the Popen's pid is the command itself.
        proc: subprocess.Popen[Any] = subprocess.Popen(
            self.exec_prefix(ns) + list(argv), **popen_kwargs
        )
        self._processes.append(proc)
        return proc

    def run(
        self, ns: str, argv: Sequence[str], *, timeout: float | None = 60.0, **run_kwargs: Any
    ) -> subprocess.CompletedProcess[Any]:
        """Run ``argv`` to completion inside namespace ``ns`` (a :func:`subprocess.run` wrapper)."""
        self._require_open()
        return subprocess.run(self.exec_prefix(ns) + list(argv), timeout=timeout, **run_kwargs)

    def initial_window(self, ns: str, segments: int) -> None:
        """TCP's initial congestion window (and the receive window offered) on `ns`'s route across the line,
        as `ip route change … initcwnd N initrwnd N` sets it on a host: how much a new or long-idle
        connection may send in its first round trip (Linux's default: 10 segments)."""
        self._require_open()
        dev = _CLIENT_IF if ns == self.client_ns else _SERVER_IF
        network = f"{self.client_ip.rsplit('.', 1)[0]}.0/{self.prefix_len}"
        _run(["ip", "-n", ns, "route", "change", network, "dev", dev, "proto", "kernel", "scope", "link", "src",
              self.client_ip if ns == self.client_ns else self.server_ip, "initcwnd", str(segments), "initrwnd",
              str(segments)])

    def wait_for_port(self, ns: str, host: str, port: int, timeout_s: float = 20.0) -> None:
        """Until something in namespace ``ns`` accepts connections on host:port; RuntimeError after ``timeout_s``."""
        probe = f"import socket; socket.create_connection(({host!r}, {port}), timeout=1).close()"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.run(ns, [sys.executable, "-c", probe], capture_output=True).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"nothing listening on {host}:{port} in {ns}")

    def _require_open(self) -> None:
        if not self._opened or self._closed:
            raise DelayLineError("the DelayLine is not open; use it as a context manager")

    def __repr__(self) -> str:
        return (
            f"DelayLine({self.client_ns} {self.client_ip} <-> {self.server_ns} {self.server_ip}, "
            f"c2s={self.client_to_server_ms} ms, s2c={self.server_to_client_ms} ms)"
        )


def _stop_process(
    proc: subprocess.Popen[Any], *, process_group: bool, wait_first_s: float = 0.0, grace_s: float = 2.0
) -> None:
    """Ask nicely, then insist. ``process_group`` also reaches the process's children.

    ``wait_first_s`` gives a process that exits on its own cue (the forwarder, at end of stdin)
    time to do so before it is signalled.
    """
    if wait_first_s > 0:
        try:
            proc.wait(timeout=wait_first_s)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        _signal(proc, sig, process_group)
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _signal(proc: subprocess.Popen[Any], sig: signal.Signals, process_group: bool) -> None:
    try:
        # Signal the group only if the process leads its own group (a caller may have opted out
        # of the new session, and killpg on *our* group would kill the test run), and only while
        # the leader is unreaped: until then its pid, the group id, cannot have been recycled.
        if process_group and proc.poll() is None and os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except (ProcessLookupError, PermissionError):
        pass


def _close_quietly(stream: IO[Any] | None) -> None:
    if stream is None:
        return
    try:
        stream.close()
    except OSError:
        pass


@atexit.register
def _close_forgotten_lines() -> None:
    for line in list(_open_lines):
        line.close()

