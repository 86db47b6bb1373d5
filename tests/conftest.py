"""Shared fixtures: a real test upstream on loopback and a real `firsttoken serve` process in front of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.gateway_process import GatewayProcess, free_port
from support.openai_upstream import UPSTREAM_KEY, UpstreamThread
from support.quiet import machine_share
from support.redis_server import RedisServer

CLIENT_KEY = "client-key-for-tests-123456"
OTHER_CLIENT_KEY = "second-client-key-654321"
ADMIN_KEY = "operator-admin-key-for-tests-0987"  # /metrics, /v1/routing and every tenant's journeys
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


# The files that take longest, longest first: those of 20 s or more in the test calls of a quiet run
# (`pytest --durations=0`, 2026-12-07; set-up left out, as it holds the waits for the quiet modules). With
# `--dist loadfile` a file goes whole to one process; one that starts last runs alone while the other process
# has nothing left (the soak did, for three minutes).
LONGEST_FIRST = ("server/test_soak.py", "faults/test_fault_matrix.py", "server/test_dashboard_browser.py",
                 "server/test_workers.py", "server/test_responses_route.py", "routing/test_invisible_failures.py",
                 "test_demo.py", "cache/test_gateway_cache.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first; the quiet modules last, where the other process waiting for them to finish
    waits behind a short test rather than a long one (a quiet module's first test waits for the machine
    inside its own time limit). xdist keeps this order (--no-loadscope-reorder in pyproject.toml)."""
    tests = Path(__file__).parent

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("quiet") is not None:
            return len(LONGEST_FIRST) + 1
        name = item.path.relative_to(tests).as_posix()
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order, a file's tests theirs


@pytest.fixture(autouse=True, scope="module")
def _machine_alone(request: pytest.FixtureRequest) -> Iterator[None]:
    """A module marked `quiet` runs with no test of the other process beside it, its fixtures' set-up
    included (autouse: before the module's other fixtures). See support.quiet."""
    if request.node.get_closest_marker("quiet") is None:
        yield
        return
    with machine_share(quiet=True):
        yield


@pytest.fixture(autouse=True)
def _machine_share(request: pytest.FixtureRequest) -> Iterator[None]:
    """Any other test shares the machine, between the quiet modules."""
    if request.node.get_closest_marker("quiet") is not None:
        yield  # its module holds the machine already
        return
    with machine_share(quiet=False):
        yield


@pytest.fixture(scope="session")
def upstream() -> Iterator[UpstreamThread]:
    with UpstreamThread() as server:
        yield server


def gateway_settings(upstream_url: str) -> dict:
    return {
        "cache": False,  # every request must cross to the upstream: the edge cache has its own tests
        "upstreams": {
            "fake": {"url": upstream_url, "key": UPSTREAM_KEY, "pool": {"warm": 2},
                     "timeouts": {"first_byte": 2.0, "idle": 2.0}},
            "dead": {"url": f"http://127.0.0.1:{free_port()}/v1", "pool": {"warm": 0},
                     "timeouts": {"connect": 1.0}},
        },
        "models": {
            "chat": ["fake/echo"],
            "chat-with-fallback": ["dead/echo", "fake/echo"],
            "only-dead": ["dead/echo"],
            "flaky": ["fake/error-503", "fake/echo"],
        },
        "keys": [{"name": "app", "key": CLIENT_KEY}, {"name": "other", "key": OTHER_CLIENT_KEY}],
        "admin_key": ADMIN_KEY,
        "limits": {"max_body_bytes": 65536},
        "streaming": {"heartbeat_s": 0.3},
    }


@pytest.fixture(scope="session")
def gateway(upstream: UpstreamThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    workdir: Path = tmp_path_factory.mktemp("gateway")
    with GatewayProcess(gateway_settings(upstream.url), workdir) as process:
        yield process


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server (CI installs it)."""
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server
