"""A sentence-transformers model run by ONNX Runtime: the same vectors as torch, about 2.5× sooner for one
short sentence on a server CPU (measured in docs/benchmarks.md), and no torch in the process once the
graph exists.

The graph is exported once from the model's own weights with torch.onnx (tokenizer excluded; pooling and
normalisation included, so the graph's output is the embedding) and kept in the user's cache folder under
a name that changes when the model's files do. Optimum does this export too, but pins transformers below
the release sentence-transformers needs here; the export itself is a few lines of torch.onnx.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from firsttoken.private_files import private_directory

log = logging.getLogger("firsttoken.cache")

EXPORT_VERSION = 1  # bump when export() changes what it writes
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class OnnxEmbedder:
    def __init__(self, directory: Path, threads: int = 1, cache: Path | None = None) -> None:
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise RuntimeError("pip install 'firsttoken[semantic]' (onnxruntime, tokenizers)") from exc
        self.path = exported_path(directory, cache)
        if not self.path.is_file():
            export(directory, self.path)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads  # the event loop keeps a core
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # idle threads sleep
        self._session = onnxruntime.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        self._inputs = [i.name for i in self._session.get_inputs()]
        self.dimensions = int(self._session.get_outputs()[0].shape[-1])
        self._tokenizer: Any = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self._tokenizer.enable_truncation(_max_length(directory))
        self._tokenizer.enable_padding()  # to the longest of a batch (the shipped file pads every text to 128)

    def embed(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        columns = {"input_ids": [e.ids for e in encodings], "attention_mask": [e.attention_mask for e in encodings],
                   "token_type_ids": [e.type_ids for e in encodings]}
        feed = {name: np.asarray(columns[name], dtype=np.int64) for name in self._inputs}
        return self._session.run(None, feed)[0].astype(np.float32, copy=False)


def exported_path(directory: Path, cache: Path | None = None) -> Path:
    """Where the graph of the model in `directory` is kept: named by the model's files, sizes and times."""
    digest = hashlib.blake2b(f"{EXPORT_VERSION}:{directory.resolve()}".encode(), digest_size=8)
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(directory)}:{stat.st_size}:{int(stat.st_mtime)}".encode())
    folder = cache or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "firsttoken" / "embeddings"
    return folder / f"{directory.name}-{digest.hexdigest()}.onnx"


def export(directory: Path, path: Path) -> None:
    """Trace the sentence-transformers model (transformer, pooling, normalisation) into an ONNX file."""
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise RuntimeError("the first export of the embedding model needs torch: pip install "
                           "'firsttoken[semantic]'") from exc
    log.info("exporting %s to ONNX at %s (once)", directory, path)
    model = SentenceTransformer(str(directory), device="cpu").eval()

    class Pipeline(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            features = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
            return torch.nn.functional.normalize(self.model(features)["sentence_embedding"], dim=1)

    sample = model.preprocess(["a sentence to trace the graph with", "and a second, longer one to pad"])
    dynamic = {0: "batch", 1: "tokens"}
    private_directory(path.parent)  # 0700 whatever the umask: a model others could swap decides cache hits
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as partial:
        pass
    try:
        with torch.no_grad():
            torch.onnx.export(Pipeline().eval(), tuple(sample[name] for name in _INPUTS), partial.name,
                              input_names=list(_INPUTS), output_names=["embedding"],
                              dynamic_axes={**{name: dynamic for name in _INPUTS}, "embedding": {0: "batch"}},
                              opset_version=17, dynamo=False)
        os.replace(partial.name, path)  # whole or not at all: another process may be exporting too
    finally:
        Path(partial.name).unlink(missing_ok=True)


def _max_length(directory: Path) -> int:
    """The model's own limit on tokens (sentence_bert_config.json), 256 when it names none."""
    try:
        return int(json.loads((directory / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, ValueError, KeyError):
        return 256
