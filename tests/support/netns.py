"""Waiting on servers inside the delay line's network namespaces."""

from __future__ import annotations

import sys
import time

from firsttoken.lab.delayline import DelayLine


def wait_for_port(line: DelayLine, ns: str, host: str, port: int) -> None:
    """Until something in namespace `ns` can connect to host:port (20 s at most)."""
    probe = f"import socket; socket.create_connection(({host!r}, {port}), timeout=1).close()"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if line.run(ns, [sys.executable, "-c", probe], capture_output=True).returncode == 0:
            return
        time.sleep(0.2)
    raise RuntimeError(f"nothing listening on {host}:{port} in {ns}")
