"""Every option of a scenario: one after the other, each in a process of its own (the engine is pure
Python: threads would share one core), or each a task on a Dask cluster for a sweep that outgrows one
machine. A process costs about a second to start (it imports the planner), so it pays only when an
option's run takes longer than that."""

from __future__ import annotations

import socket
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context

from firsttoken.plan.scenario import Scenario
from firsttoken.plan.simulate import simulate
from firsttoken.plan.summary import OptionSummary, summarise


def plan_option(scenario: Scenario, index: int) -> OptionSummary:
    return summarise(scenario, simulate(scenario, scenario.options[index]))


class ClusterError(RuntimeError):
    """The Dask cluster cannot be used: not installed here, or not answering at its address."""


def compare(scenario: Scenario, done: Callable[[str], None] = lambda name: None,
            processes: int = 1, cluster: str | None = None) -> list[OptionSummary]:
    """The options' summaries, in the scenario's order; `done` hears each option's name as it finishes.
    `cluster`: a Dask scheduler's address (tcp://host:8786), whose workers run the options instead."""
    if cluster is not None:
        return _on_cluster(scenario, done, cluster)
    count = len(scenario.options)
    processes = min(count, processes)
    if processes == 1:
        summaries = []
        for index in range(count):
            summaries.append(plan_option(scenario, index))
            done(scenario.options[index].name)
        return summaries
    results: dict[int, OptionSummary] = {}
    # spawn, not fork: the caller may hold threads (a progress bar's, a test runner's)
    with ProcessPoolExecutor(processes, mp_context=get_context("spawn")) as pool:
        running = {pool.submit(plan_option, scenario, index): index for index in range(count)}
        for finished in as_completed(running):
            index = running[finished]
            results[index] = finished.result()
            done(scenario.options[index].name)
    return [results[index] for index in range(count)]


CONNECT_TIMEOUT_S = 10


def _refuses_at_once(address: str) -> None:
    """ConnectionRefusedError when nothing listens at a TCP or TLS scheduler's address: Dask would retry it
    for the whole of its timeout before saying so."""
    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, location = parse_address(address)
    if scheme in ("tcp", "tls"):
        try:
            socket.create_connection(parse_host_port(location), timeout=CONNECT_TIMEOUT_S).close()
        except ConnectionRefusedError:
            raise
        except OSError:
            pass  # unreachable or slow to answer: Dask tries for itself, and says why


def _on_cluster(scenario: Scenario, done: Callable[[str], None], address: str) -> list[OptionSummary]:
    """Each option a task on the Dask cluster at `address`, whose workers have this version of firsttoken
    installed (and a lengths file, if the scenario names one, at the same path). The scenario goes to the
    workers once; the summaries come back."""
    try:
        from distributed import Client, as_completed  # optional: pip install 'firsttoken[cluster]'
    except ImportError:
        raise ClusterError("--cluster needs Dask's distributed scheduler: pip install 'firsttoken[cluster]'") from None
    try:
        _refuses_at_once(address)
        client = Client(address, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError) as exc:
        raise ClusterError(f"no Dask scheduler answers at {address}: {exc}") from None
    with client:
        shared = client.scatter(scenario, broadcast=True)
        running = {client.submit(plan_option, shared, index, pure=False): index
                   for index in range(len(scenario.options))}
        results: dict[int, OptionSummary] = {}
        for finished in as_completed(running):
            index = running[finished]
            results[index] = finished.result()
            done(scenario.options[index].name)
    return [results[index] for index in range(len(scenario.options))]
