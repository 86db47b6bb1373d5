"""What the users ask: the prompt and answer lengths of each request, drawn for the scenario's preset.

Answer lengths are the simulated region's own (sim/lengths.py: the Azure LLM inference trace's quantiles
for chat, a label's word or two for classification). Prompt lengths are log-normal, by construction: a
median and a spread chosen per preset to stand for its kind of request (a chat turn with some history; a
question with retrieved passages; an agent's turn carrying its tools and history; a text to label), not
measured; a scenario that knows its own gives a file of them (`workload.lengths`), and each request's
prompt and answer are drawn from its rows.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from firsttoken.sim.lengths import Kind, natural_lengths

# A lengths file's columns, by the names traces give them (the Azure LLM inference traces' are the last).
PROMPT_COLUMNS = ("prompt_tokens", "input_tokens", "ContextTokens")
ANSWER_COLUMNS = ("output_tokens", "completion_tokens", "GeneratedTokens")


class LengthsError(ValueError):
    """A lengths file that cannot be used; the message says which row or column."""


@dataclass(frozen=True)
class Recorded:
    """Lengths as a file gives them: prompts, and answers where it has them."""

    prompts: np.ndarray
    answers: np.ndarray | None


@functools.cache
def read_lengths(path: str) -> Recorded:
    """A CSV file of lengths with a header row: a prompt column and, optionally, an answer column."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            header = reader.fieldnames or []
            prompt = next((c for c in PROMPT_COLUMNS if c in header), None)
            answer = next((c for c in ANSWER_COLUMNS if c in header), None)
            if prompt is None:
                raise LengthsError(f"{path}: no prompt column; the header needs one of {', '.join(PROMPT_COLUMNS)}"
                                   f" (it has {', '.join(header) or 'nothing'})")
            prompts, answers = [], []
            for number, row in enumerate(reader, start=2):
                try:
                    prompts.append(int(row[prompt]))
                    if answer is not None:
                        answers.append(int(row[answer]))
                except (TypeError, ValueError):
                    raise LengthsError(f"{path}, line {number}: lengths are whole numbers of tokens") from None
    except OSError as exc:
        raise LengthsError(f"{path}: {exc.strerror or exc}") from None
    if not prompts:
        raise LengthsError(f"{path}: no rows under the header")
    if min(prompts) < 1 or (answers and min(answers) < 1):
        raise LengthsError(f"{path}: every length is at least 1 token")
    return Recorded(np.array(prompts, dtype=np.int64), np.array(answers, dtype=np.int64) if answers else None)


@dataclass(frozen=True)
class Preset:
    prompt_median: int  # tokens
    prompt_sigma: float  # of the log: 0.5 is about 1.6× either way between the 16th and 84th percentiles
    answers: Kind
    shared_prefix: int = 0  # leading prompt tokens every request repeats (system prompt, tool definitions)


PRESETS = {
    "chat": Preset(800, 0.8, Kind.CHAT),
    "rag": Preset(3000, 0.5, Kind.CHAT),  # the retrieved passages differ from question to question
    "agent": Preset(8000, 0.5, Kind.CHAT, shared_prefix=4000),  # the agent's instructions and tools
    "classification": Preset(300, 0.6, Kind.CLASSIFICATION, shared_prefix=160),  # the labelling instructions
}
MAX_PROMPT = 100_000  # the log-normal's far tail, cut where a context window would


def draw(preset: str, count: int, rng: np.random.Generator,
         lengths: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`count` prompt lengths and answer lengths, in tokens: the preset's, or rows drawn from a lengths file
    (its answers, or the preset's where it has none)."""
    spec = PRESETS[preset]
    if lengths is not None:
        recorded = read_lengths(str(lengths))
        rows = rng.integers(0, len(recorded.prompts), count)
        prompts = recorded.prompts[rows]
        if recorded.answers is not None:
            return prompts, recorded.answers[rows]
    else:
        drawn = rng.lognormal(np.log(spec.prompt_median), spec.prompt_sigma, count)
        prompts = np.clip(np.rint(drawn), 1, MAX_PROMPT).astype(np.int64)
    return prompts, natural_lengths(spec.answers, rng.random(count))
