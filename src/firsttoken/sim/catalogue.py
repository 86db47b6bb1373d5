"""The catalogue: GPUs and models the simulated region can run, by their lower-case hyphenated names.

Built-in entries carry their published numbers; users add or replace entries from the config as plain dicts.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any

# Weight bytes per parameter. int4 is weight-only quantisation (AWQ/GPTQ-style W4A16): matmuls run at bf16 speed.
BYTES_PER_PARAM: dict[str, float] = {"bf16": 2, "fp8": 1, "int4": 0.5}
# KV-cache bytes per element. int4 deployments keep an fp8 KV cache (4-bit KV costs too much accuracy).
KV_BYTES_PER_ELEMENT: dict[str, float] = {"bf16": 2, "fp8": 1, "int4": 1}
PRECISIONS = tuple(BYTES_PER_PARAM)

_NAME = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")


class CatalogueError(ValueError):
    """A bad catalogue name or entry; the message names the field or the known names."""


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise CatalogueError(f"{name!r}: a catalogue name uses lower-case letters, digits, '.' and '-' "
                             "(e.g. 'h100', 'llama-3.1-8b')")


def _check_positive(entry: Any, field: str, value: Any, integer: bool = False) -> None:
    ok_type = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok_type or not math.isfinite(value) or value <= 0:
        want = "a positive integer" if integer else "a positive number"
        raise CatalogueError(f"{entry.name}.{field}: expected {want}, got {value!r}")


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_gb: float  # decimal GB, as the datasheets print it
    bandwidth_tb_s: float
    bf16_tflops: float  # dense, no sparsity
    fp8_tflops: float | None = None  # None: no fp8 tensor cores; fp8 weights are upcast and run at bf16 speed
    power_w: float | None = None  # the board's maximum power (TDP), for the planner's energy; None: unknown

    def __post_init__(self) -> None:
        _check_name(self.name)
        for f in ("memory_gb", "bandwidth_tb_s", "bf16_tflops"):
            _check_positive(self, f, getattr(self, f))
        for f in ("fp8_tflops", "power_w"):
            if getattr(self, f) is not None:
                _check_positive(self, f, getattr(self, f))

    def peak_flops(self, precision: str) -> float:
        """Dense FLOP/s the matmuls of `precision` run at (int4 is weight-only, so bf16 compute)."""
        if precision == "fp8" and self.fp8_tflops is not None:
            return self.fp8_tflops * 1e12
        return self.bf16_tflops * 1e12


@dataclass(frozen=True)
class Model:
    name: str
    params_b: float  # total parameters, billions
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    max_context: int
    vocab: int
    head_dim: int = 0  # 0: hidden // heads
    active_params_b: float = 0.0  # 0: dense, all parameters active per token
    experts: int = 1  # MoE: routed experts per layer
    experts_per_token: int = 1  # MoE: top-k
    embedding_dims: int = 0  # an encoder that answers /v1/embeddings with vectors this long; 0: it generates text
    reasoning: bool = False  # it thinks before it answers (reasoning tokens, counted and timed)

    def __post_init__(self) -> None:
        _check_name(self.name)
        if self.head_dim == 0 and type(self.hidden) is int and type(self.heads) is int and self.heads > 0:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        if self.active_params_b == 0:
            object.__setattr__(self, "active_params_b", self.params_b)
        for f in ("params_b", "active_params_b"):
            _check_positive(self, f, getattr(self, f))
        if self.embedding_dims:
            _check_positive(self, "embedding_dims", self.embedding_dims, integer=True)
        for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "max_context", "vocab", "experts",
                  "experts_per_token"):
            _check_positive(self, f, getattr(self, f), integer=True)
        if self.heads % self.kv_heads:
            raise CatalogueError(f"{self.name}.kv_heads: {self.kv_heads} must divide heads ({self.heads})")
        if self.experts_per_token > self.experts:
            raise CatalogueError(f"{self.name}.experts_per_token: {self.experts_per_token} exceeds experts "
                                 f"({self.experts})")
        if self.active_params_b > self.params_b:
            raise CatalogueError(f"{self.name}.active_params_b: {self.active_params_b} exceeds params_b "
                                 f"({self.params_b})")
        if self.experts == self.experts_per_token and self.active_params_b != self.params_b:
            raise CatalogueError(f"{self.name}.active_params_b: a dense model (experts == experts_per_token) "
                                 f"has all {self.params_b}B parameters active; set experts and experts_per_token "
                                 "for a mixture of experts")

    @property
    def is_moe(self) -> bool:
        return self.experts > self.experts_per_token

    def weight_params_touched(self, tokens: int) -> float:
        """Parameters read from memory by one forward pass over `tokens` tokens.

        Dense: all of them. MoE: the shared part plus every expert some token routes to. With uniform routing
        the expected fraction of experts touched per layer is 1 - (1 - k/n)^tokens, so one token reads exactly
        the active parameters and a large batch approaches the total (Mixtral, k=2 of n=8: 8 tokens ≈ 90 %).
        """
        if not self.is_moe:
            return self.params_b * 1e9
        n, k = self.experts, self.experts_per_token
        per_expert = (self.params_b - self.active_params_b) / (n - k)  # from total = S + nE, active = S + kE
        shared = self.params_b - n * per_expert
        touched = n * (1 - (1 - k / n) ** max(tokens, 1))
        return (shared + touched * per_expert) * 1e9


# Sources: vendor datasheets, dense (non-sparse) tensor throughput; see shared/reference/published_numbers.md.
BUILTIN_GPUS: tuple[Gpu, ...] = (
    Gpu("a100", 80, 2.039, 312, None, 400),  # NVIDIA A100 SXM 80GB datasheet (HBM2e, 400 W); no fp8 tensor cores
    Gpu("h100", 80, 3.35, 989, 1979, 700),  # NVIDIA H100 SXM datasheet (HBM3; up to 700 W)
    Gpu("h200", 141, 4.8, 989, 1979, 700),  # NVIDIA H200 SXM datasheet (HBM3e; up to 700 W); same compute as H100
    Gpu("l4", 24, 0.3, 121, 242, 72),  # NVIDIA L4 datasheet (GDDR6, 72 W)
)

# Sources: each model's published config.json on Hugging Face (layers, hidden, heads, KV heads, head_dim,
# max_position_embeddings, vocab) and its model card / safetensors total for the parameter count.
BUILTIN_MODELS: tuple[Model, ...] = (
    # meta-llama/Llama-3.2-1B: 1.24B, tied embeddings, head_dim 64
    Model("llama-3.2-1b", 1.236, 16, 2048, 32, 8, 131072, 128256, head_dim=64),
    # meta-llama/Llama-3.1-8B
    Model("llama-3.1-8b", 8.030, 32, 4096, 32, 8, 131072, 128256),
    # Qwen/Qwen2.5-7B-Instruct: 32k native context (131k only with YaRN)
    Model("qwen2.5-7b", 7.616, 28, 3584, 28, 4, 32768, 152064),
    # mistralai/Mistral-7B-Instruct-v0.3
    Model("mistral-7b", 7.248, 32, 4096, 32, 8, 32768, 32768),
    # mistralai/Mixtral-8x7B-Instruct-v0.1: 46.7B total, 12.9B active (2 of 8 experts per token)
    Model("mixtral-8x7b", 46.70, 32, 4096, 32, 8, 32768, 32000, active_params_b=12.9, experts=8,
          experts_per_token=2),
    # meta-llama/Llama-3.3-70B-Instruct
    Model("llama-3.3-70b", 70.55, 80, 8192, 64, 8, 131072, 128256),
    # meta-llama/Llama-3.1-405B: the frontier-sized dense model
    Model("llama-3.1-405b", 405.85, 126, 16384, 128, 8, 131072, 128256),
    # deepseek-ai/DeepSeek-R1-Distill-Llama-8B: Llama-3.1-8B's shape, trained to reason before answering
    Model("deepseek-r1-distill-llama-8b", 8.030, 32, 4096, 32, 8, 131072, 128256, reasoning=True),
    # Qwen/Qwen3-8B: 8.19B, head_dim 128, 40k native context; thinks unless told not to
    Model("qwen3-8b", 8.191, 36, 4096, 32, 8, 40960, 151936, head_dim=128, reasoning=True),
    # Encoders for /v1/embeddings. BAAI/bge-small-en-v1.5: a BERT-small, 33.4M parameters, 384-wide vectors
    Model("bge-small-en-v1.5", 0.0334, 12, 384, 12, 12, 512, 30522, embedding_dims=384),
    # BAAI/bge-m3: an XLM-RoBERTa-large, 568M parameters, 1024-wide vectors, 8k context
    Model("bge-m3", 0.568, 24, 1024, 16, 16, 8192, 250002, embedding_dims=1024),
)


class Catalogue:
    """GPUs and models by name; lookups that miss name the closest known entries."""

    def __init__(self, gpus: Mapping[str, Gpu], models: Mapping[str, Model]) -> None:
        self.gpus: dict[str, Gpu] = dict(gpus)
        self.models: dict[str, Model] = dict(models)

    @classmethod
    def builtin(cls) -> Catalogue:
        return cls({g.name: g for g in BUILTIN_GPUS}, {m.name: m for m in BUILTIN_MODELS})

    def gpu(self, name: str) -> Gpu:
        return _lookup(self.gpus, name, "gpu")

    def model(self, name: str) -> Model:
        return _lookup(self.models, name, "model")

    def with_additions(self, gpus: Mapping[str, Any] | None = None,
                       models: Mapping[str, Any] | None = None) -> Catalogue:
        """A new catalogue with user entries (plain dicts, as from YAML) added; a same-named entry replaces."""
        new_gpus = dict(self.gpus)
        for name, spec in (gpus or {}).items():
            new_gpus[name] = _from_dict(Gpu, name, spec, "gpus")
        new_models = dict(self.models)
        for name, spec in (models or {}).items():
            new_models[name] = _from_dict(Model, name, spec, "models")
        return Catalogue(new_gpus, new_models)


def _lookup(table: Mapping[str, Any], name: str, kind: str) -> Any:
    key = name.strip().lower()
    if key in table:
        return table[key]
    close = difflib.get_close_matches(key, list(table), n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise CatalogueError(f"unknown {kind} {name!r}.{hint} Known {kind}s: {', '.join(sorted(table))}.")


def _from_dict(cls: type, name: Any, spec: Any, section: str) -> Any:
    where = f"{section}.{name}"
    _check_name(name)
    if not isinstance(spec, Mapping):
        raise CatalogueError(f"{where}: expected a mapping of fields, got {type(spec).__name__}")
    allowed = [f.name for f in fields(cls) if f.name != "name"]
    unknown = sorted(set(spec) - set(allowed))
    if unknown:
        raise CatalogueError(f"{where}: unknown field(s) {', '.join(map(str, unknown))}; "
                             f"allowed: {', '.join(allowed)}")
    required = [f.name for f in fields(cls) if f.name != "name" and f.default is MISSING]
    missing = [f for f in required if f not in spec]
    if missing:
        raise CatalogueError(f"{where}: missing field(s) {', '.join(missing)}")
    try:
        return cls(name=name, **spec)
    except CatalogueError as e:  # "<name>.<field>: ..." becomes "<section>.<name>.<field>: ..."
        raise CatalogueError(f"{section}.{e}") from None
