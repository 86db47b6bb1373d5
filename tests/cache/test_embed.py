"""The shipped embedding model gives sentence-transformers' vectors (within what int8 weights allow),
alone or in batches of mixed lengths, with nothing but ONNX Runtime and the tokenizers library."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from firsttoken.cache.embed import DEFAULT_MODEL, ModelFiles, OnnxEmbedder, load_embedder, model_files

REFERENCE = json.loads((Path(__file__).parent / "data" / "embedding_reference.json").read_text())


@pytest.fixture(scope="module")
def embedder() -> OnnxEmbedder:
    return load_embedder()


def test_vectors_match_the_sentence_transformers_reference(embedder: OnnxEmbedder) -> None:
    reference = np.asarray(REFERENCE["vectors"], dtype=np.float32)
    alone = np.vstack([embedder.embed([text]) for text in REFERENCE["sentences"]])
    batched = embedder.embed(REFERENCE["sentences"])  # short and long together: grouped by length, padded
    assert batched.shape == (len(REFERENCE["sentences"]), 384) and batched.dtype == np.float32
    assert np.allclose(alone, batched, atol=1e-5)
    cosine = np.sum(batched * reference, axis=1)
    # int8 weights: measured 0.9960 at worst ("ok thanks") and 0.9994 on average; a wrong tokenizer
    # limit, pooling or padding mask falls far below.
    assert cosine.min() > 0.995 and cosine.mean() > 0.999
    assert np.allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)


def test_a_long_prompt_is_cut_where_the_model_was_trained_to_stop(embedder: OnnxEmbedder) -> None:
    """At 256 tokens, as sentence-transformers does (the tokenizer file alone would cut at 128)."""
    long = REFERENCE["sentences"][-1]
    tokens = embedder._tokenizer.encode(long)
    assert len(tokens.ids) == 256
    assert float(embedder.embed([long])[0] @ np.asarray(REFERENCE["vectors"][-1])) > 0.999


def test_nothing_but_onnx_runtime_is_loaded(embedder: OnnxEmbedder) -> None:
    assert "torch" not in sys.modules and "sentence_transformers" not in sys.modules
    assert embedder.embed([]).shape == (0, 384)


def test_a_graph_that_is_not_the_one_tested_is_refused(tmp_path: Path) -> None:
    shipped = model_files(DEFAULT_MODEL)
    swapped = tmp_path / "model.onnx"
    swapped.write_bytes(shipped.graph.read_bytes()[:-1] + b"\0")
    with pytest.raises(RuntimeError, match="not the embedding model"):
        OnnxEmbedder(ModelFiles(swapped, shipped.tokenizer, shipped.max_tokens, shipped.sha256))


def test_another_model_is_a_directory_with_its_graph_and_tokenizer(tmp_path: Path) -> None:
    shipped = model_files(DEFAULT_MODEL)
    with pytest.raises(RuntimeError, match="model.onnx and tokenizer.json"):
        model_files(str(tmp_path))
    (tmp_path / "model.onnx").write_bytes(shipped.graph.read_bytes())
    (tmp_path / "tokenizer.json").write_bytes(shipped.tokenizer.read_bytes())
    (tmp_path / "sentence_bert_config.json").write_text('{"max_seq_length": 128}')
    files = model_files(str(tmp_path))
    assert files.max_tokens == 128 and files.sha256 is None
    vector = OnnxEmbedder(files).embed(["How do I cook beans?"])[0]
    assert float(vector @ np.asarray(REFERENCE["vectors"][0])) > 0.999
