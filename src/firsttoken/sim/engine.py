"""The engine of one replica: continuous batching at iteration level, in virtual time.

Each step runs one decode token for every sequence past its prefill, plus prefill chunks for the
sequences still reading their prompts, within a token budget (as vLLM's chunked prefill does). A
sequence is admitted only while the KV cache can hold its prompt and its longest answer (a
conservative stand-in for paged allocation: it queues a little earlier than vLLM does); the rest
wait in arrival order. The engine computes no wall-clock time itself: `step(now)` says how long the
step takes and what it produced, so the same engine drives a real-time server and a what-if planner.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from firsttoken.sim.roofline import Deployment

# Tokens per step, decode and prefill together (vLLM's max_num_batched_tokens, TensorRT-LLM's
# max_num_tokens). 4096 reproduces NIM's Llama-3.3-70B rows at concurrency 25 and 50 within 15 %
# (tests/sim/test_engine.py); 2048 underestimates TTFT there by a quarter, 8192 overestimates it.
DEFAULT_TOKEN_BUDGET = 4096
DEFAULT_MAX_BATCH = 256  # sequences running at once (vLLM's max_num_seqs)


@dataclass(eq=False)
class Sequence:
    """One request in the engine, with the times the server turns into events and ground truth."""

    prompt_tokens: int
    max_output: int
    arrived_at: float
    prefilled: int = 0  # starts at `cached` when the replica holds the prompt's prefix
    generated: int = 0
    cached: int = 0  # prompt tokens whose prefill the replica's prefix cache skipped
    admitted_at: float | None = None
    cold_s: float = 0.0  # of its wait, the part spent while the model was being loaded back
    first_token_at: float | None = None
    finished_at: float | None = None

    @property
    def kv_reserved(self) -> int:
        return self.prompt_tokens + self.max_output

    @property
    def context(self) -> int:
        return self.prefilled + self.generated


@dataclass
class Step:
    """What one step did: when it ends, and which sequences got a token (first ones included)."""

    duration: float
    tokens: list[Sequence] = field(default_factory=list)
    first_tokens: list[Sequence] = field(default_factory=list)
    finished: list[Sequence] = field(default_factory=list)


class Engine:
    def __init__(self, deployment: Deployment, *, token_budget: int = DEFAULT_TOKEN_BUDGET,
                 max_batch: int = DEFAULT_MAX_BATCH) -> None:
        self.deployment = deployment
        self.token_budget = token_budget
        self.max_batch = max_batch
        self.kv_capacity = deployment.max_kv_tokens
        self.kv_used = 0
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def check_fits(self, sequence: Sequence) -> None:
        """Raise ValueError for a request that could never be admitted, however long it waited."""
        if sequence.kv_reserved > self.kv_capacity:
            raise ValueError(f"a request of {sequence.prompt_tokens} + {sequence.max_output} tokens can never fit "
                             f"this replica's KV cache of {self.kv_capacity} tokens")

    def submit(self, sequence: Sequence) -> None:
        self.check_fits(sequence)
        self.waiting.append(sequence)

    def cancel(self, sequence: Sequence) -> None:
        """Drop a sequence whose client went away, freeing its KV reservation."""
        if sequence in self.waiting:
            self.waiting.remove(sequence)
        elif sequence in self.running:
            self.running.remove(sequence)
            self.kv_used -= sequence.kv_reserved

    def backlog(self) -> int:
        """Waiting sequences the next step could not admit (the batch or the KV cache is full): the queue."""
        slots, kv = self.max_batch - len(self.running), self.kv_capacity - self.kv_used
        for i, sequence in enumerate(self.waiting):
            if slots <= 0 or sequence.kv_reserved > kv:
                return len(self.waiting) - i  # admission is in order: everyone behind waits too
            slots -= 1
            kv -= sequence.kv_reserved
        return 0

    @property
    def busy(self) -> bool:
        return bool(self.running or self.waiting)

    def step(self, now: float) -> Step | None:
        """Run one iteration starting at `now`; None when there is nothing to run."""
        self._admit(now)
        decoding = [s for s in self.running if s.prefilled == s.prompt_tokens]
        budget = self.token_budget - len(decoding)
        chunks: list[tuple[Sequence, int]] = []
        for sequence in self.running:
            if budget <= 0:
                break
            if sequence.prefilled < sequence.prompt_tokens:
                chunk = min(sequence.prompt_tokens - sequence.prefilled, budget)
                chunks.append((sequence, chunk))
                budget -= chunk
        if not decoding and not chunks:
            return None
        prefill_tokens = sum(c for _, c in chunks)
        offset = chunks[0][0].prefilled if chunks else 0
        duration = self.deployment.mixed_step_s(len(decoding), sum(s.context for s in decoding), prefill_tokens,
                                                offset)
        end = now + duration
        step = Step(duration)
        for sequence in decoding:
            sequence.generated += 1
            step.tokens.append(sequence)
        for sequence, chunk in chunks:
            sequence.prefilled += chunk
            if sequence.prefilled == sequence.prompt_tokens:  # the last chunk's step samples the first token
                sequence.generated = 1
                sequence.first_token_at = end
                step.first_tokens.append(sequence)
                step.tokens.append(sequence)
        self._finish(step, end)
        return step

    def decode_run(self, now: float, most: int) -> np.ndarray | None:
        """When each of the next steps would end if nothing came: every running sequence decoding and none
        waiting that could be admitted, up to the step before the first of them finishes (step() runs that
        one: a finish frees its place when its step starts, which routing sees), `most` at most. Nothing is
        applied (advance() applies as many as ran before something came). The planner's fast path: the
        same tokens and times as calling step() over and over, at the cost of one; the live region steps
        one at a time. None when not in such a state, or when fewer than two steps would run."""
        self._admit(now)
        left, context = most + 1, 0
        # one pass, written out (no min() or property calls): a day's plan makes a million of these passes
        for sequence in self.running:
            if sequence.prefilled < sequence.prompt_tokens:
                return None
            remaining = sequence.max_output - sequence.generated
            if remaining < left:
                left = remaining
            context += sequence.prefilled + sequence.generated
        left -= 1
        if not self.running or left < 2:
            return None
        durations = self.deployment.decode_steps_s(len(self.running), context, left)
        return now + np.cumsum(durations)

    def advance(self, steps: int) -> None:
        """The first `steps` steps of a decode_run have run (none of them finishes a sequence)."""
        for sequence in self.running:
            sequence.generated += steps

    def _finish(self, step: Step, end: float) -> None:
        """The sequences of `step` that reached their answer's length end at `end`, and free their KV."""
        step.finished += [s for s in step.tokens if s.generated >= s.max_output]
        for sequence in step.finished:
            sequence.finished_at = end
        if step.finished:
            done = set(map(id, step.finished))
            self.running = [s for s in self.running if id(s) not in done]
            self.kv_used -= sum(s.kv_reserved for s in step.finished)

    def _admit(self, now: float) -> None:
        while (self.waiting and len(self.running) < self.max_batch
               and self.kv_used + self.waiting[0].kv_reserved <= self.kv_capacity):
            sequence = self.waiting.popleft()
            sequence.admitted_at = now
            self.kv_used += sequence.kv_reserved
            self.running.append(sequence)
