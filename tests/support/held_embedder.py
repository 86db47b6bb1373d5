"""An embedding model a test holds, for a gateway in another process: the shipped static embedding, made to
run on the encoder's worker thread (as a slow model's would), and to wait while a file named HELD exists in
the gateway's directory. Named in a config as
`embedding: python:support.held_embedder:HeldEmbedder` (with tests/ on the gateway's PYTHONPATH)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from firsttoken.cache.static_embed import StaticEmbedder

HELD = "embedder-held"
PATIENCE_S = 30  # a test that forgets to open it fails slowly, not never


class HeldEmbedder:
    inline = False  # a worker thread's, like any model that takes milliseconds or seconds

    def __init__(self) -> None:
        self._model = StaticEmbedder()
        self.dimensions = self._model.dimensions

    def embed(self, texts: list[str]) -> np.ndarray:
        given_up = time.monotonic() + PATIENCE_S
        while Path(HELD).exists() and time.monotonic() < given_up:
            time.sleep(0.005)
        return self._model.embed(texts)
