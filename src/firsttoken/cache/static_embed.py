"""A static embedding: each token has one vector, and a text's is their mean (WordLlama's l2_supercat, 256
dimensions, shipped inside the `wordllama` package: nothing is downloaded).

No network of layers runs, so a prompt costs microseconds on the calling thread rather than tens of
milliseconds on a worker (measured on this machine, docs/benchmarks.md: 0.05 ms for 8 words, 0.3 ms for
150), which is what lets the semantic lookup sit on the request's path at all. The cost left grows with
the text, so a long prompt is read as its head and its tail (CLIP_CHARS each): the question of a long
prompt is usually at one end, and the guards still compare both texts whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

NAME = "wordllama-l2-supercat"
CLIP_CHARS = 1000  # of the head and of the tail: about 0.3 ms each, whatever the prompt's length


class StaticEmbedder:
    inline = True

    def __init__(self) -> None:
        import wordllama
        from safetensors import safe_open
        from tokenizers import Tokenizer
        from wordllama.inference import WordLlamaInference

        # Built from the package's own files: WordLlama.load() looks for the tokenizer where the package
        # does not ship it, and would then try to download it.
        shipped = Path(wordllama.__file__).resolve().parent
        with safe_open(str(shipped / "weights" / "l2_supercat_256.safetensors"), framework="np") as weights:
            table = weights.get_tensor("embedding.weight")
        tokenizer = Tokenizer.from_file(str(shipped / "tokenizers" / "l2_supercat_tokenizer_config.json"))
        self._model: Any = WordLlamaInference(table, tokenizer)
        self.dimensions = int(table.shape[1])

    def embed(self, texts: list[str]) -> np.ndarray:
        vectors = self._model.embed([clip(text) for text in texts], norm=True)
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.dimensions)


def clip(text: str) -> str:
    """The text's head and tail, when it is longer than both."""
    if len(text) <= 2 * CLIP_CHARS:
        return text
    return f"{text[:CLIP_CHARS]}\n{text[-CLIP_CHARS:]}"
