"""What the users ask: the prompt and answer lengths of each request, drawn for the scenario's preset.

Answer lengths are the simulated region's own (sim/lengths.py: the Azure LLM inference trace's quantiles
for chat, a label's word or two for classification). Prompt lengths are log-normal, by construction: a
median and a spread chosen per preset to stand for its kind of request (a chat turn with some history; a
question with retrieved passages; an agent's turn carrying its tools and history; a text to label), not
measured; a scenario that knows its own should say so once scenarios can take a file of lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from firsttoken.sim.lengths import Kind, natural_length


@dataclass(frozen=True)
class Preset:
    prompt_median: int  # tokens
    prompt_sigma: float  # of the log: 0.5 is about 1.6× either way between the 16th and 84th percentiles
    answers: Kind


PRESETS = {
    "chat": Preset(800, 0.8, Kind.CHAT),
    "rag": Preset(3000, 0.5, Kind.CHAT),
    "agent": Preset(8000, 0.5, Kind.CHAT),
    "classification": Preset(300, 0.6, Kind.CLASSIFICATION),
}
MAX_PROMPT = 100_000  # the log-normal's far tail, cut where a context window would


def draw(preset: str, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`count` prompt lengths and answer lengths, in tokens."""
    spec = PRESETS[preset]
    prompts = np.clip(np.rint(rng.lognormal(np.log(spec.prompt_median), spec.prompt_sigma, count)), 1, MAX_PROMPT)
    answers = np.array([natural_length(spec.answers, f) for f in rng.random(count)], dtype=np.int64)
    return prompts.astype(np.int64), answers
