"""Closed-loop load on an engine, in virtual time: a fixed number of users, each sending the next request
the moment its last one ends. It is how serving benchmarks state "concurrency N" (NVIDIA's AIPerf, for
the NIM rows the roofline is calibrated on), so the engine is checked against them this way."""

from __future__ import annotations

from firsttoken.sim.engine import Engine, Sequence


def closed_loop(engine: Engine, clients: int, prompt: int, output: int, completed: int) -> list[Sequence]:
    """`clients` users with fixed lengths, until `completed` requests past the first `clients` (the warm-up)
    have finished; those, in the order they finished."""
    now, done = 0.0, list[Sequence]()
    for _ in range(clients):
        engine.submit(Sequence(prompt, output, now))
    while len(done) < completed + clients:
        step = engine.step(now)
        assert step is not None
        now += step.duration
        for finished in step.finished:
            done.append(finished)
            engine.submit(Sequence(prompt, output, now))
    return done[clients:]
