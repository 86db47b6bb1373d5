"""Step times from the roofline: decode is bound by memory bandwidth, prefill by compute.

A step reads every weight once (shared by the whole batch) plus the running sequences' KV cache; a prefill
multiplies every prompt token through the active parameters. Achieved fractions of the datasheet peaks turn
the ideal times into measured ones; `Efficiency` holds them, calibrated against a published serving run.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from firsttoken.sim.catalogue import BYTES_PER_PARAM, KV_BYTES_PER_ELEMENT, Gpu, Model

# Fraction of each GPU's memory kept back from weights and KV cache for activations, CUDA graphs, NCCL buffers
# and the CUDA context: vLLM's default gpu_memory_utilization is 0.9.
RESERVED_FRACTION = 0.10

# Cold-start loading (shared/reference/published_numbers.md, "Cold starts"): sllm-store on H100 with NVMe
# measured Llama-3.1-8B (16.1 GB at bf16) loading in 4.4 s with a standard loader, 3.65 GB/s; their own loader
# took 0.7 s (about 23 GB/s). The default is the standard loader, what most deployments run.
DEFAULT_LOAD_BANDWIDTH_GB_S = 3.65
# The engine's own start (process, CUDA context, memory profiling, CUDA-graph capture). A chosen constant,
# not a measurement: with it an 8B model cold-starts in about 9.4 s, inside the 7 s to minutes that
# scale-to-zero platforms commonly show.
ENGINE_START_S = 5.0


class DeploymentError(ValueError):
    """A deployment that cannot run (does not fit, bad precision or tensor-parallel degree)."""


@dataclass(frozen=True)
class Efficiency:
    """Achieved fractions of peak and fixed per-step costs, calibrated on NVIDIA NIM's published run of
    Llama-3.3-70B FP8, TP2 on 2×H100 SXM, 5 000 input / 500 output tokens, concurrency 1 (TTFT 406.8 ms,
    ITL 18.58 ms; shared/reference/published_numbers.md).

    The per-step costs are chosen, the fractions solved from them:

    - `step_overhead_ms` 0.5: kernel launches and the scheduler's Python per engine step (with CUDA graphs).
    - `tp_comm_ms_per_layer` 0.01: two all-reduces per layer (after attention, after the MLP) at ~5 µs each;
      decode-sized messages are latency-bound and NVLink's one-shot all-reduce is roughly flat in tp, so this
      is a per-layer constant whenever tp > 1 (80 layers: 0.8 ms). Prefill's larger, bandwidth-bound
      all-reduces are folded into `prefill_compute`, which was calibrated at tp 2.
    - `decode_bandwidth`: one decode step at context ≈ 5 250 (prompt + half the output) reads per GPU
      35.28 GB of weights (70.55B × 1 byte / 2) + 0.43 GB of KV (5 250 × 2 × 80 layers × 4 KV heads × 128 ×
      1 byte) = 35.71 GB; at 3.35 TB/s that is 10.66 ms. 18.58 − 0.5 − 0.8 = 17.28 ms, so 10.66 / 17.28 =
      0.617 → 0.62 (the published range is 50–80 %). Predicted ITL 18.49 ms.
    - `prefill_compute`: 5 000 tokens cost 2 × 70.55B × 5 000 = 705.5 TFLOP in the matmuls plus 32.8 TFLOP of
      causal attention (2 × 80 layers × 64 heads × 128 × 5 000²) = 738.3 TFLOP over 2 × 1 979 TFLOP/s fp8.
      TTFT = prefill + one decode step: 406.8 − 18.49 − 1.3 = 387.0 ms, so 738.3 / 3 958 / 0.387 = 0.482 →
      0.48 (published range 40–60 %). Predicted TTFT 408.4 ms.

    Decode's compute side (large batches) uses `prefill_compute` too: it is the same matmuls' efficiency.
    """

    decode_bandwidth: float = 0.62
    prefill_compute: float = 0.48
    step_overhead_ms: float = 0.5
    tp_comm_ms_per_layer: float = 0.01

    def __post_init__(self) -> None:
        for name in ("decode_bandwidth", "prefill_compute"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise DeploymentError(f"efficiency.{name}: expected a fraction in (0, 1], got {value!r}")
        for name in ("step_overhead_ms", "tp_comm_ms_per_layer"):
            value = getattr(self, name)
            if value < 0:
                raise DeploymentError(f"efficiency.{name}: expected milliseconds >= 0, got {value!r}")


@dataclass(frozen=True)
class Deployment:
    """One replica: `model` at `precision`, sharded tensor-parallel over `tp` of `gpu`."""

    gpu: Gpu
    model: Model
    precision: str = "bf16"
    tp: int = 1
    efficiency: Efficiency = field(default_factory=Efficiency)

    def __post_init__(self) -> None:
        if self.precision not in BYTES_PER_PARAM:
            raise DeploymentError(f"precision {self.precision!r}: use one of {', '.join(BYTES_PER_PARAM)}")
        if type(self.tp) is not int or self.tp < 1:
            raise DeploymentError(f"tp {self.tp!r}: expected a positive integer")
        m = self.model
        kv_ok = m.kv_heads % self.tp == 0 if self.tp <= m.kv_heads else self.tp % m.kv_heads == 0
        if m.heads % self.tp or not kv_ok:  # how vLLM shards heads; KV heads replicate past kv_heads
            raise DeploymentError(f"tp {self.tp}: {m.name} has {m.heads} attention heads and {m.kv_heads} KV "
                                  "heads; tp must divide the heads and divide or be a multiple of the KV heads")
        if self.kv_free_bytes_per_gpu <= 0:
            raise DeploymentError(self._does_not_fit())

    # Memory.

    @property
    def weight_bytes(self) -> float:
        return self.model.params_b * 1e9 * BYTES_PER_PARAM[self.precision]

    @property
    def weight_bytes_per_gpu(self) -> float:
        return self.weight_bytes / self.tp

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V for every layer, across the whole replica."""
        m = self.model
        return 2 * m.layers * m.kv_heads * m.head_dim * KV_BYTES_PER_ELEMENT[self.precision]

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        """Each GPU holds its share of KV heads; past kv_heads they replicate (one head per GPU)."""
        m = self.model
        heads_per_gpu = math.ceil(m.kv_heads / self.tp)
        return 2 * m.layers * heads_per_gpu * m.head_dim * KV_BYTES_PER_ELEMENT[self.precision]

    @property
    def usable_bytes_per_gpu(self) -> float:
        return self.gpu.memory_gb * 1e9 * (1 - RESERVED_FRACTION)

    @property
    def kv_free_bytes_per_gpu(self) -> float:
        return self.usable_bytes_per_gpu - self.weight_bytes_per_gpu

    @property
    def kv_cache_bytes(self) -> float:
        """Free memory for the KV cache across the replica: memory × tp − weights − the reserved fraction."""
        return self.kv_free_bytes_per_gpu * self.tp

    @property
    def max_kv_tokens(self) -> int:
        """Tokens (summed over all running sequences) the KV cache holds."""
        return int(self.kv_free_bytes_per_gpu // self.kv_bytes_per_token_per_gpu)

    # Time.

    def decode_step_s(self, context_tokens: int, batch: int) -> float:
        """One engine step producing a token for each of `batch` sequences holding `context_tokens` in all."""
        if batch < 1 or context_tokens < 0:
            raise ValueError(f"decode_step_s: batch {batch} must be >= 1, context_tokens {context_tokens} >= 0")
        eff, m = self.efficiency, self.model
        weights = m.weight_params_touched(batch) * BYTES_PER_PARAM[self.precision] / self.tp
        memory_s = (weights + context_tokens * self.kv_bytes_per_token_per_gpu) / self._bandwidth()
        flops = 2 * m.active_params_b * 1e9 * batch + 4 * m.layers * m.heads * m.head_dim * context_tokens
        compute_s = flops / (self.tp * self.gpu.peak_flops(self.precision) * eff.prefill_compute)
        return max(memory_s, compute_s) + self._fixed_s()

    def prefill_s(self, tokens: int) -> float:
        """A prompt of `tokens` in one pass: the matmuls plus causal attention, never faster than one read of
        the weights it touches and a write of its KV."""
        if tokens < 1:
            raise ValueError(f"prefill_s: tokens {tokens} must be >= 1")
        eff, m = self.efficiency, self.model
        flops = 2 * m.active_params_b * 1e9 * tokens + 2 * m.layers * m.heads * m.head_dim * tokens**2
        compute_s = flops / (self.tp * self.gpu.peak_flops(self.precision) * eff.prefill_compute)
        weights = m.weight_params_touched(tokens) * BYTES_PER_PARAM[self.precision] / self.tp
        memory_s = (weights + tokens * self.kv_bytes_per_token_per_gpu) / self._bandwidth()
        return max(compute_s, memory_s) + self._fixed_s()

    def mixed_step_s(self, decode_batch: int, decode_context: int, prefill_tokens: int, prefill_offset: int) -> float:
        """One iteration of a continuously batching engine: a token for each of `decode_batch` sequences
        (holding `decode_context` tokens in all) plus a prefill chunk of `prefill_tokens` that starts
        `prefill_offset` tokens into its prompt. The weights are read once for both; compute adds up."""
        if decode_batch < 0 or prefill_tokens < 0 or decode_batch + prefill_tokens < 1:
            raise ValueError(f"mixed_step_s: nothing to run (decode_batch {decode_batch}, prefill {prefill_tokens})")
        attended = decode_context + prefill_tokens * (prefill_offset + prefill_tokens / 2)  # causal: half the chunk
        memory_s, compute_s = self._step_parts(decode_batch + prefill_tokens,
                                               decode_context + prefill_offset + prefill_tokens, attended)
        return max(memory_s, compute_s) + self._fixed_s()

    def decode_steps_s(self, batch: int, context: int, count: int) -> np.ndarray:
        """`count` decode steps in a row of the same `batch` sequences, holding `context` tokens in all at the
        first (each step adds `batch`): what mixed_step_s gives each, computed at once (the planner skips
        ahead through stretches of pure decode with it)."""
        memory_0, memory_per, compute_0, compute_per = _decode_lines(self, batch)
        contexts = context + batch * np.arange(count, dtype=np.float64)
        return np.maximum(memory_0 + memory_per * contexts, compute_0 + compute_per * contexts) + self._fixed_s()

    def _step_parts(self, tokens: int, kv_tokens: Any, attended: Any) -> tuple[Any, Any]:
        """A step's memory time and compute time: the weights `tokens` touch and `kv_tokens` of KV read or
        written, against their matmuls and attention over `attended` token pairs. Scalars or arrays alike."""
        eff, m = self.efficiency, self.model
        weights = m.weight_params_touched(tokens) * BYTES_PER_PARAM[self.precision] / self.tp
        memory_s = (weights + kv_tokens * self.kv_bytes_per_token_per_gpu) / self._bandwidth()
        flops = 2 * m.active_params_b * 1e9 * tokens + 4 * m.layers * m.heads * m.head_dim * attended
        compute_s = flops / (self.tp * self.gpu.peak_flops(self.precision) * eff.prefill_compute)
        return memory_s, compute_s

    def load_s(self, load_bandwidth_gb_s: float = DEFAULT_LOAD_BANDWIDTH_GB_S,
               engine_start_s: float = ENGINE_START_S) -> float:
        """A cold start: all weights through one storage path (the replica's GPUs share it), then the engine."""
        if load_bandwidth_gb_s <= 0:
            raise ValueError(f"load_bandwidth_gb_s {load_bandwidth_gb_s!r}: expected a positive number")
        return self.weight_bytes / (load_bandwidth_gb_s * 1e9) + engine_start_s

    def _bandwidth(self) -> float:
        return self.gpu.bandwidth_tb_s * 1e12 * self.efficiency.decode_bandwidth

    def _fixed_s(self) -> float:
        eff = self.efficiency
        comm_ms = eff.tp_comm_ms_per_layer * self.model.layers if self.tp > 1 else 0.0
        return (eff.step_overhead_ms + comm_ms) / 1e3

    def _does_not_fit(self) -> str:
        m, g = self.model, self.gpu
        gb = 1e9
        need_gpus = math.floor(self.weight_bytes / self.usable_bytes_per_gpu) + 1  # fewest that leave KV room
        others = ", ".join(f"{p} needs {m.params_b * b:.1f} GB" for p, b in BYTES_PER_PARAM.items()
                           if b < BYTES_PER_PARAM[self.precision])
        return (f"{m.name} at {self.precision} does not fit on {self.tp}× {g.name}: its weights need "
                f"{self.weight_bytes / gb:.1f} GB ({m.params_b}B parameters × {BYTES_PER_PARAM[self.precision]:g} "
                f"bytes), {self.weight_bytes_per_gpu / gb:.1f} GB per GPU, but each {g.name} has "
                f"{self.usable_bytes_per_gpu / gb:.1f} GB usable ({g.memory_gb:g} GB, "
                f"{RESERVED_FRACTION:.0%} reserved), leaving nothing for the KV cache. Use at least "
                f"{need_gpus} GPUs' worth of memory (a larger tp or GPU)"
                + (f", or a smaller precision ({others})." if others else "."))


@functools.lru_cache(maxsize=4096)
def _decode_lines(deployment: Deployment, batch: int) -> tuple[float, float, float, float]:
    """A decode step of `batch` sequences holding c tokens in all: its memory time and its compute time,
    each a constant plus a multiple of c (Deployment._step_parts), as (constant, per token) twice. Worked
    out once per batch size: the planner's decode runs ask for them hundreds of thousands of times."""
    memory_0, compute_0 = deployment._step_parts(batch, 0, 0)
    memory_1, compute_1 = deployment._step_parts(batch, 1, 1)
    return memory_0, memory_1 - memory_0, compute_0, compute_1 - compute_0
