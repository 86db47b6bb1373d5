"""Start the real `firsttoken serve` as a separate process for integration tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class GatewayProcess:
    def __init__(self, settings: dict[str, Any], workdir: Path, env: dict[str, str] | None = None,
                 args: list[str] | None = None, wait_ready: bool = True) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.config_path = workdir / "firsttoken.yaml"
        self.config_path.write_text(yaml.safe_dump(settings))
        self.log_path = workdir / "gateway.log"
        self.env = {**os.environ, **(env or {})}
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
        deadline = time.monotonic() + 60  # a gateway that loads an embedding model takes seconds on a busy machine
        path = "/readyz" if self.wait_ready else "/healthz"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gateway exited early:\n{self.log()}")
            try:
                if httpx.get(self.url + path, timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.__exit__()
        raise RuntimeError(f"gateway did not become ready:\n{self.log()}")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")
