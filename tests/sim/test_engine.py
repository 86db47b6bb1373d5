"""The batching engine against published serving measurements, in virtual time."""

from __future__ import annotations

import statistics

import pytest

from firsttoken.sim.catalogue import Catalogue
from firsttoken.sim.closed_loop import closed_loop
from firsttoken.sim.engine import Engine, Sequence
from firsttoken.sim.roofline import Deployment

CATALOGUE = Catalogue.builtin()


def deployment(model: str, gpu: str, precision: str, tp: int) -> Deployment:
    return Deployment(CATALOGUE.gpu(gpu), CATALOGUE.model(model), precision, tp)


def ttft_and_itl(sequences: list[Sequence]) -> tuple[float, float]:
    ttft = statistics.mean(s.first_token_at - s.arrived_at for s in sequences)
    itl = statistics.mean((s.finished_at - s.first_token_at) / (s.max_output - 1) for s in sequences)
    return ttft * 1000, itl * 1000


NIM = deployment("llama-3.3-70b", "h100", "fp8", 2)


@pytest.mark.parametrize("concurrency, ttft_ms, itl_ms", [
    (1, 406.8, 18.58),   # published_numbers.md, NVIDIA NIM Llama-3.3-70B FP8 TP2 2×H100, 5000 in / 500 out
    (25, 688.7, 38.75),  # the same table, concurrency 25
    (50, 834.5, 59.73),  # and 50
])
def test_nim_rows_within_20_percent(concurrency: int, ttft_ms: float, itl_ms: float) -> None:
    sequences = closed_loop(Engine(NIM), concurrency, 5000, 500, completed=concurrency * 4)
    ttft, itl = ttft_and_itl(sequences)
    assert ttft == pytest.approx(ttft_ms, rel=0.20), ttft
    assert itl == pytest.approx(itl_ms, rel=0.20), itl


def test_past_the_kv_cache_the_queue_grows() -> None:
    """NIM at concurrency 100: saturated, 7 996 ms TTFT from queueing, 92.91 ms ITL. The KV cache here holds
    80 such requests, so 20 wait: ITL matches, and TTFT is many times the unsaturated one."""
    engine = Engine(NIM)
    sequences = closed_loop(engine, 100, 5000, 500, completed=300)
    ttft, itl = ttft_and_itl(sequences)
    assert itl == pytest.approx(92.91, rel=0.20)
    assert ttft > 5 * 834.5 and engine.waiting


def test_requests_queue_once_the_kv_cache_is_full() -> None:
    engine = Engine(deployment("llama-3.1-8b", "l4", "bf16", 1))
    prompt, output = 4000, 1000
    fits = engine.kv_capacity // (prompt + output)
    for _ in range(fits + 3):
        engine.submit(Sequence(prompt, output, 0.0))
    engine.step(0.0)
    assert len(engine.running) == fits and len(engine.waiting) == 3
    now, room_freed = 0.0, False
    while engine.waiting:  # the queue drains only into room that finished sequences freed
        before = len(engine.waiting)
        step = engine.step(now)
        now += step.duration
        if len(engine.waiting) < before:
            assert room_freed
        room_freed = bool(step.finished)
        assert engine.kv_used <= engine.kv_capacity


def test_a_request_that_can_never_fit_is_refused() -> None:
    engine = Engine(deployment("llama-3.1-8b", "l4", "bf16", 1))
    with pytest.raises(ValueError, match="can never fit"):
        engine.submit(Sequence(engine.kv_capacity, 10, 0.0))


def test_an_idle_engine_has_no_step_and_everything_finishes() -> None:
    engine = Engine(deployment("llama-3.2-1b", "h100", "bf16", 1))
    assert engine.step(0.0) is None
    sequences = [Sequence(100 * (i + 1), 20, 0.0) for i in range(5)]
    for s in sequences:
        engine.submit(s)
    now = 0.0
    while (step := engine.step(now)) is not None:
        now += step.duration
    assert all(s.generated == 20 and s.finished_at is not None for s in sequences)
    assert engine.kv_used == 0 and not engine.busy
