"""Start the real `firsttoken sim` as a separate process for integration tests: a simulated region that
can be killed (SIGKILL, for crash tests), have its faults changed while it runs (POST /sim/faults), and
say what became of the requests it saw (GET /sim/stats)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from support.gateway_process import answers, free_port, terminate


class SimProcess:
    """`firsttoken sim --port PORT *args` on loopback; its output goes to `sim-PORT.log` in `workdir`."""

    def __init__(self, workdir: Path, *args: str, name: str = "sim") -> None:
        self.port = free_port()
        self.args = list(args)
        self.workdir = workdir
        self.log_path = workdir / f"{name}-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The OpenAI base URL, as an upstream's `url:`."""
        return self.base + "/v1"

    def start(self) -> SimProcess:
        """Start the process without waiting for it (start several, then `wait_ready` each)."""
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "firsttoken", "sim", "--port", str(self.port), *self.args],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=self.workdir)
        return self

    def wait_ready(self, timeout: float = 60.0) -> SimProcess:
        assert self.process is not None, "start() first"
        # an import-heavy start takes seconds on a busy machine
        if answers(self.process, self.url + "/models", timeout, "sim", self.log):
            return self
        self.stop()
        raise RuntimeError(f"sim did not become ready:\n{self.log()}")

    def __enter__(self) -> SimProcess:
        return self.start().wait_ready()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        terminate(self.process)
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        """SIGKILL: the region dies at once, its connections with it (a crashed host)."""
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def faults(self, **changes: Any) -> dict[str, Any]:
        """Change the faults in force (queue_ms, stall_share, stall_s, error_share, error, seed); returns
        the settings now in force."""
        response = httpx.post(self.base + "/sim/faults", json=changes, timeout=5)
        response.raise_for_status()
        return response.json()

    def stats(self) -> dict[str, Any]:
        response = httpx.get(self.base + "/sim/stats", timeout=5)
        response.raise_for_status()
        return response.json()

    def requests(self) -> Counter[str]:
        """What became of the chat requests the region saw: received, answered, refused, failed, abandoned
        (a Counter: an absent key is 0)."""
        return Counter(self.stats()["requests"])

    def reset_stats(self) -> None:
        httpx.delete(self.base + "/sim/stats", timeout=5).raise_for_status()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
