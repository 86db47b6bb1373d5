"""The region's embeddings: deterministic vectors in which texts that share words point the same way.

The region is not a language model, so its vectors carry no meaning; they carry what a test of an
embedding client, a vector store or a semantic cache needs: the same text always gets the same unit
vector, texts that share words have a cosine similarity that grows with the words they share, and
unrelated texts are close to orthogonal. Each word (the region's own tokens, lower-cased) has a random
Gaussian direction seeded by the word, the width and `sim.seed`; a text's vector is the normalised sum
of its words' (random indexing, as in Kanerva et al. 2000).
"""

from __future__ import annotations

import math
import random
from functools import lru_cache

from firsttoken.sim.text import words


def embed(text: str, dims: int, seed: int) -> list[float]:
    """The text's unit vector, `dims` wide."""
    total = [0.0] * dims
    for word in words(text.lower()) or [""]:
        for i, value in enumerate(_direction(word, dims, seed)):
            total[i] += value
    norm = math.sqrt(sum(v * v for v in total)) or 1.0
    return [v / norm for v in total]


def shortened(vector: list[float], dims: int) -> list[float]:
    """The vector's first `dims` components, normalised again (as Matryoshka-trained encoders shorten theirs
    for a smaller `dimensions`)."""
    head = vector[:dims]
    norm = math.sqrt(sum(v * v for v in head)) or 1.0
    return [v / norm for v in head]


@lru_cache(maxsize=8192)
def _direction(word: str, dims: int, seed: int) -> tuple[float, ...]:
    draw = random.Random(f"{seed}:{dims}:{word}")
    return tuple(draw.gauss(0.0, 1.0) for _ in range(dims))
