"""How long the region's answers run when nothing cuts them short: a length drawn for each request from
what real services generate for that kind of request, then capped by the request's max_tokens.

The lengths are the quantiles of the Azure LLM inference trace 2023 (Patel et al., "Splitwise: Efficient
generative LLM inference using phase splitting", ISCA 2024; github.com/Azure/AzurePublicDataset,
data/AzureLLMInferenceTrace_conv.csv and _code.csv, CC-BY): the tokens each request of a production
conversation service (19 365 requests) and of a production coding service (8 818) generated. The coding
service is code completion, so its answers are short (median 13 tokens); a chat about code is the chat's
distribution. A classification's answer is its label, a word or two; no trace measures those, so that
one is by construction (docs/architecture.md, "The simulated region").

The draw is a hash of the region's seed and the request's content (not of its max_tokens or whether it
streams), so the same question always gets an answer of the same length, streamed or not, and a test
can rely on it.
"""

from __future__ import annotations

import hashlib
import math
import re
from bisect import bisect_right
from enum import Enum
from statistics import NormalDist
from typing import Any

import numpy as np
import orjson


class Kind(Enum):
    CHAT = "chat"
    CODE_COMPLETION = "code completion"
    CLASSIFICATION = "classification"


# (percentile, generated tokens): nearest-rank quantiles of each trace's GeneratedTokens column.
_LENGTHS: dict[Kind, tuple[tuple[float, int], ...]] = {
    Kind.CHAT: ((0, 7), (1, 16), (5, 41), (10, 54), (15, 67), (20, 77), (25, 85), (30, 91), (35, 96),
                (40, 103), (45, 113), (50, 129), (55, 151), (60, 177), (65, 217), (70, 384), (75, 395),
                (80, 400), (85, 411), (90, 424), (95, 451), (97, 509), (98, 540), (99, 601), (99.5, 643),
                (99.9, 954), (100, 1000)),
    Kind.CODE_COMPLETION: ((0, 6), (1, 6), (5, 6), (10, 7), (15, 7), (20, 8), (25, 9), (30, 9), (35, 10),
                           (40, 11), (45, 12), (50, 13), (55, 14), (60, 16), (65, 18), (70, 20), (75, 24),
                           (80, 29), (85, 39), (90, 55), (95, 90), (97, 128), (98, 172), (99, 252),
                           (99.5, 361), (99.9, 824), (100, 1899)),
    Kind.CLASSIFICATION: ((0, 1), (60, 1), (90, 2), (100, 3)),
}

# What marks a request's kind, in its last user message (the system prompt included for a label).
_LABEL = re.compile(r"\b(classify|classification|categori[sz]e|label|sentiment|yes or no|true or false|"
                    r"one word|single word|which category)\b", re.IGNORECASE)
# Fill-in-the-middle and "complete this code" requests, as code completion services send them.
_COMPLETION = re.compile(r"<fim_(prefix|suffix|middle)>|<\|fim_|\bcomplete (this|the following) code\b",
                         re.IGNORECASE)


def kind_of(instruction: str) -> Kind:
    """The kind of request, from the text that says what it wants."""
    if _COMPLETION.search(instruction):
        return Kind.CODE_COMPLETION
    if _LABEL.search(instruction):
        return Kind.CLASSIFICATION
    return Kind.CHAT


def natural_length(kind: Kind, fraction: float) -> int:
    """The length at `fraction` (0 ≤ fraction < 1) of the kind's distribution, interpolated between its
    quantiles."""
    table = _LENGTHS[kind]
    percentile = fraction * 100
    at = min(bisect_right([p for p, _ in table], percentile), len(table) - 1)
    (p0, n0), (p1, n1) = table[at - 1], table[at]
    return max(round(n0 + (n1 - n0) * (percentile - p0) / (p1 - p0)), 1)


def natural_lengths(kind: Kind, fractions: np.ndarray) -> np.ndarray:
    """natural_length for many fractions at once (the planner draws a day's requests)."""
    percentiles, lengths = zip(*_LENGTHS[kind], strict=True)
    return np.maximum(np.rint(np.interp(fractions * 100, percentiles, lengths)), 1).astype(np.int64)


# How long a reasoning model thinks, by effort: log-normal, median 256 / 512 / 1 024 tokens, σ 0.8 (about
# 2.2× either way between the 16th and 84th percentiles). By construction, not from a trace: no published
# per-request distribution of reasoning tokens was at hand; providers say only that they run "from a few
# hundred to tens of thousands" (OpenAI's reasoning guide), and these keep offline runs to seconds.
REASONING_MEDIAN = {"low": 256, "medium": 512, "high": 1024}
REASONING_SIGMA = 0.8


def reasoning_length(effort: str, fraction: float) -> int:
    """Reasoning tokens at `fraction` of the effort's distribution."""
    z = NormalDist().inv_cdf(min(max(fraction, 1e-9), 1 - 1e-9))
    return max(round(REASONING_MEDIAN[effort] * math.exp(REASONING_SIGMA * z)), 1)


def fraction_for(seed: int, content: Any) -> float:
    """A number in [0, 1) that depends only on the seed and the request's content."""
    digest = hashlib.blake2b(orjson.dumps(content, option=orjson.OPT_SORT_KEYS), digest_size=8,
                             key=seed.to_bytes(8, "big", signed=True)).digest()
    return int.from_bytes(digest, "big") / 2**64
