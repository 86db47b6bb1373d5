"""Start the real `firsttoken serve` as a separate process for integration tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers(process: subprocess.Popen[bytes], url: str, timeout_s: float, what: str, log: Callable[[], str]) -> bool:
    """Wait until GET `url` answers 200 (True) or `timeout_s` passes (False); RuntimeError if the process
    exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited early ({process.returncode}):\n{log()}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    return False


def terminate(process: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, and SIGKILL after 10 s."""
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class GatewayProcess:
    def __init__(self, settings: dict[str, Any] | Path, workdir: Path, env: dict[str, str] | None = None,
                 args: list[str] | None = None, wait_ready: bool = True) -> None:
        """`settings`: written to a config file in `workdir`, or a config file to use as it is."""
        self.port = free_port()
        self.workdir = workdir
        if isinstance(settings, Path):
            self.config_path = settings
        else:
            self.config_path = workdir / "firsttoken.yaml"
            self.config_path.write_text(yaml.safe_dump(settings))
        self.log_path = workdir / "gateway.log"
        # where `serve` notes its journey log for `firsttoken journeys`: the test's, not the user's
        self.env = {**os.environ, "XDG_STATE_HOME": str(workdir / "state"), **(env or {})}
        self.args = args or []
        self.wait_ready = wait_ready
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> GatewayProcess:
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "firsttoken", "serve", "--config", str(self.config_path),
             "--port", str(self.port), *self.args],
            stdout=self._log, stderr=subprocess.STDOUT, env=self.env, cwd=self.workdir)
        path = "/readyz" if self.wait_ready else "/healthz"
        # a gateway that loads an embedding model takes seconds on a busy machine
        if answers(self.process, self.url + path, 60, "gateway", self.log):
            return self
        self.__exit__()
        raise RuntimeError(f"gateway did not become ready:\n{self.log()}")

    def __exit__(self, *exc: object) -> None:
        terminate(self.process)
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")
