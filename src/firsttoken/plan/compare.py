"""Every option of a scenario: one after the other, or each in a process of its own (the engine is pure
Python: threads would share one core). A process costs about a second to start (it imports the planner),
so it pays only when an option's run takes longer than that."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context

from firsttoken.plan.scenario import Scenario
from firsttoken.plan.simulate import simulate
from firsttoken.plan.summary import OptionSummary, summarise


def plan_option(scenario: Scenario, index: int) -> OptionSummary:
    return summarise(scenario, simulate(scenario, scenario.options[index]))


def compare(scenario: Scenario, done: Callable[[str], None] = lambda name: None,
            processes: int = 1) -> list[OptionSummary]:
    """The options' summaries, in the scenario's order; `done` hears each option's name as it finishes."""
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
