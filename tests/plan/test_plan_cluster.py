"""`firsttoken plan --cluster`: the options as tasks on a Dask cluster (here a local one of two worker
processes, on loopback) give the plan this machine gives; a cluster that is not there is a clear error."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lagos.yaml"


def plan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "firsttoken", "plan", str(EXAMPLE), "--duration", "60", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def cluster() -> Iterator[distributed.LocalCluster]:
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as local:
        yield local


def test_a_cluster_of_processes_gives_the_plan_this_machine_gives(cluster: distributed.LocalCluster) -> None:
    here = plan("--json")
    there = plan("--json", "--cluster", cluster.scheduler_address)
    assert here.returncode == there.returncode == 0, there.stderr
    assert json.loads(there.stdout) == json.loads(here.stdout)
    # and the workers did the work: one task per option, each computed
    assert cluster.scheduler.task_prefixes["plan_option"].state_counts["memory"] == 7


def test_a_cluster_that_is_not_there_is_a_clear_error() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    answer = plan("--cluster", f"tcp://127.0.0.1:{port}")
    assert answer.returncode == 2
    assert f"no Dask scheduler answers at tcp://127.0.0.1:{port}" in answer.stderr


def test_cluster_and_processes_are_one_or_the_other() -> None:
    answer = plan("--cluster", "tcp://127.0.0.1:1", "--processes", "2")
    assert answer.returncode == 2 and "--cluster or --processes" in answer.stderr
