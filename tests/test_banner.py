"""What `firsttoken serve` prints: read at 80 columns, with the facts a newcomer needs, and only once the
port is taken (a busy port is one line)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from firsttoken import config
from firsttoken.banner import banner


def printed(settings: config.Settings, width: int, workers: int = 1) -> list[str]:
    console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115 (closed with it)
    banner(settings, workers, console)
    console.file.close()
    return [line.rstrip() for line in console.export_text().splitlines()]


@pytest.mark.parametrize("width", [80, 120])
def test_the_offline_banner_reads_at_any_width(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    monkeypatch.chdir(tmp_path)
    settings = config.load(None, environ={})
    lines = printed(settings, width)
    curl = [line for line in lines if line.startswith("curl ")]
    assert len(curl) == 1 and '"model": "llama-3.1-8b"' in curl[0]  # whole, to copy
    assert all(len(line) <= width for line in lines if line not in curl), lines
    text = "\n".join(lines)
    unwrapped = "".join(text.split())  # a path longer than its column folds onto the next line
    assert f"log{tmp_path / 'firsttoken-journeys.db'}" in unwrapped  # absolute: found from anywhere
    assert f"{tmp_path / 'firsttoken-cache.db'}" in unwrapped
    # the grid: a label in the margin, and a wrapped line continues under its column, never in the margin
    grid = lines[1:next(i for i, line in enumerate(lines) if line.startswith("No upstream"))]
    labels = [line.split()[0] for line in grid if not line.startswith("   ")]
    assert labels == ["started", "upstream", "journeys", "cache"], grid
    column = len(grid[0]) - len(grid[0][2:].lstrip().partition("  ")[2].lstrip())
    assert all(line[:column].strip() in ("", line.split()[0], " ".join(line.split()[:2])) for line in grid), grid


def test_workers_and_a_turned_off_cache_are_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = config.Settings.model_validate({"cache": False, "journeys": {"log": None}})
    text = "\n".join(printed(settings, 80, workers=3))
    said = " ".join(text.split())
    assert "3 workers" in text and "a simulated region in a process of its own, shared by the 3 workers" in said
    assert "/metrics, /v1/journeys and /v1/routing answer for all 3 workers" in said
    assert "kept in memory only" in text
    assert any(line.split() == ["cache", "off"] for line in text.splitlines())


def test_a_busy_port_is_one_line_and_no_banner(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "firsttoken", "serve", "--port", str(port)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "COLUMNS": "80", "FIRSTTOKEN_CONFIG": ""})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}: something is already listening" in lines[0]
    assert "listening on http" not in done.stderr and "Traceback" not in done.stderr
