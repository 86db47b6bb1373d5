"""A real redis-server on loopback, at a free port, with nothing written to disk; it can be stopped and
started again on the same port, or frozen (SIGSTOP: connections accepted, nothing answered) and thawed."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from support.gateway_process import free_port
from support.waiting import PATIENCE_S


class RedisServer:
    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start it (again, after stop(): on the same port, empty)."""
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server is not installed (apt-get install redis-server)"
        self.process = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                         "--appendonly", "no", "--dir", str(self.workdir)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + PATIENCE_S
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        """Stop it (connections refused from now on); thawed first, or it could not act on SIGTERM."""
        if self.process is not None:
            self.thaw()
            self.process.terminate()
            self.process.wait(10)
            self.process = None

    def freeze(self) -> None:
        """SIGSTOP: the kernel still accepts connections and takes commands in, but nothing is answered."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT: it answers again, the commands sent meanwhile included."""
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)
