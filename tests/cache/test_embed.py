"""The two embedding runtimes give the same vectors, and the ONNX graph is exported once and then reused."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("sentence_transformers")

from firsttoken.cache.embed import DEFAULT_MODEL, SentenceEmbedder, model_dir  # noqa: E402
from firsttoken.cache.onnx_embed import OnnxEmbedder  # noqa: E402

TEXTS = ["What is the way to cook beans?", "x",
         "The load_dataset() function loads a CSV file when given its path and the format. " * 12]


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> OnnxEmbedder:
    return OnnxEmbedder(model_dir(DEFAULT_MODEL), cache=tmp_path_factory.mktemp("onnx"))


def test_onnx_gives_the_vectors_torch_gives(exported: OnnxEmbedder) -> None:
    reference = SentenceEmbedder(model_dir(DEFAULT_MODEL)).embed(TEXTS)
    batch = exported.embed(TEXTS)  # padded to the longest: the mask keeps the padding out
    assert batch.shape == (3, 384) and batch.dtype == np.float32
    assert np.all(np.sum(batch * reference, axis=1) > 0.9999)
    for i, text in enumerate(TEXTS):  # one at a time, unpadded
        assert float(exported.embed([text])[0] @ reference[i]) > 0.9999
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)


def test_the_export_is_kept_and_reused(exported: OnnxEmbedder) -> None:
    written = exported.path.stat().st_mtime_ns
    again = OnnxEmbedder(model_dir(DEFAULT_MODEL), cache=exported.path.parent)
    assert again.path == exported.path and exported.path.stat().st_mtime_ns == written
    assert [p.name for p in exported.path.parent.iterdir()] == [exported.path.name]  # no partial file left
