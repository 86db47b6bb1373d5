"""The roofline step-time model against published serving numbers and physical ratios."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from firsttoken.sim.catalogue import Catalogue, CatalogueError
from firsttoken.sim.roofline import DEFAULT_LOAD_BANDWIDTH_GB_S, ENGINE_START_S, Deployment, DeploymentError

CAT = Catalogue.builtin()


def deploy(model: str, gpu: str, precision: str = "bf16", tp: int = 1) -> Deployment:
    return Deployment(CAT.gpu(gpu), CAT.model(model), precision, tp)


def test_reproduces_nim_llama_70b_fp8_tp2_h100_concurrency_1() -> None:
    # shared/reference/published_numbers.md, "Serving measurements: NVIDIA NIM, Llama-3.3-70B-Instruct, FP8,
    # tensor parallel 2 on 2×H100, 5 000 input / 500 output tokens", concurrency 1: TTFT 406.8 ms, ITL 18.58 ms.
    d = deploy("llama-3.3-70b", "h100", "fp8", 2)
    ttft = d.prefill_s(5000) + d.decode_step_s(5000, 1)
    itl = d.decode_step_s(5250, 1)  # mean context over the 500 output tokens
    assert ttft * 1e3 == pytest.approx(406.8, rel=0.20)
    assert itl * 1e3 == pytest.approx(18.58, rel=0.20)


def test_itl_h200_over_h100_follows_bandwidth() -> None:
    h100 = deploy("llama-3.3-70b", "h100", "fp8", 2).decode_step_s(5250, 1)
    h200 = deploy("llama-3.3-70b", "h200", "fp8", 2).decode_step_s(5250, 1)
    # Fixed per-step costs (1.3 ms of 18.5) pull the ratio a little towards 1.
    assert h100 / h200 == pytest.approx(4.8 / 3.35, rel=0.07)


def test_itl_70b_over_8b_follows_bytes_read() -> None:
    small, large = deploy("llama-3.1-8b", "h200", "fp8"), deploy("llama-3.3-70b", "h200", "fp8")
    ctx, fixed = 1000, small.efficiency.step_overhead_ms / 1e3  # tp 1: no communication cost
    read = [d.weight_bytes + ctx * d.kv_bytes_per_token for d in (small, large)]
    memory_ratio = (large.decode_step_s(ctx, 1) - fixed) / (small.decode_step_s(ctx, 1) - fixed)
    assert memory_ratio == pytest.approx(read[1] / read[0], rel=0.01)
    # The fixed 0.5 ms per step is a larger share of the 8B's 3.2 ms step, pulling the whole ratio below 8.8.
    assert 0.8 * read[1] / read[0] < large.decode_step_s(ctx, 1) / small.decode_step_s(ctx, 1) < read[1] / read[0]


def test_mixtral_decode_reads_active_experts_at_batch_1_and_all_at_large_batch() -> None:
    mixtral = CAT.model("mixtral-8x7b")
    assert mixtral.weight_params_touched(1) == pytest.approx(12.9e9)
    assert mixtral.weight_params_touched(256) == pytest.approx(46.7e9)
    d = deploy("mixtral-8x7b", "h200", "fp8")
    dense_13b_step = (12.9e9 + 100 * d.kv_bytes_per_token) / (4.8e12 * d.efficiency.decode_bandwidth)
    assert d.decode_step_s(100, 1) - d.efficiency.step_overhead_ms / 1e3 == pytest.approx(dense_13b_step)
    # A batch of 8 touches ~90 % of experts: each step costs nearly the full 46.7B read.
    assert d.decode_step_s(800, 8) > 3 * d.decode_step_s(100, 1)


def test_mixtral_bf16_on_one_h100_does_not_fit() -> None:
    with pytest.raises(DeploymentError, match="93.4 GB"):
        deploy("mixtral-8x7b", "h100", "bf16", 1)


def test_405b_bf16_on_one_l4_names_memory_needed() -> None:
    with pytest.raises(DeploymentError) as info:
        deploy("llama-3.1-405b", "l4", "bf16", 1)
    message = str(info.value)
    assert "llama-3.1-405b" in message and "l4" in message
    assert "811.7 GB" in message and "21.6 GB usable" in message
    assert "int4 needs 202.9 GB" in message


def test_memory_accounting() -> None:
    d = deploy("llama-3.3-70b", "h100", "fp8", 2)
    assert d.weight_bytes_per_gpu == pytest.approx(35.275e9)
    assert d.kv_bytes_per_token == 2 * 80 * 8 * 128 * 1
    assert d.kv_bytes_per_token_per_gpu == d.kv_bytes_per_token / 2
    assert d.kv_cache_bytes == pytest.approx(2 * (72e9 - 35.275e9))
    assert d.max_kv_tokens == int((72e9 - 35.275e9) // 81920)
    # int4 keeps an fp8 KV cache; past kv_heads the KV heads replicate rather than split.
    assert deploy("llama-3.1-8b", "l4", "int4").kv_bytes_per_token == 2 * 32 * 8 * 128
    wide = deploy("llama-3.1-8b", "h100", "bf16", 16)
    assert wide.kv_bytes_per_token_per_gpu == 2 * 32 * 1 * 128 * 2


def test_fp8_on_a100_runs_at_bf16_compute_with_fp8_bytes() -> None:
    fp8, bf16 = deploy("llama-3.1-8b", "a100", "fp8"), deploy("llama-3.1-8b", "a100", "bf16")
    assert CAT.gpu("a100").peak_flops("fp8") == CAT.gpu("a100").peak_flops("bf16")
    assert fp8.weight_bytes == bf16.weight_bytes / 2
    assert fp8.prefill_s(8000) == pytest.approx(bf16.prefill_s(8000), rel=0.01)  # compute-bound either way


def test_bad_precision_and_tp() -> None:
    with pytest.raises(DeploymentError, match="precision 'fp4'"):
        deploy("llama-3.1-8b", "h100", "fp4")
    with pytest.raises(DeploymentError, match="tp 3"):
        deploy("llama-3.1-8b", "h100", "bf16", 3)


def test_cold_start_from_published_loader_figures() -> None:
    # sllm-store on H100 NVMe: Llama-3.1-8B in 4.4 s with a standard loader, 0.7 s with theirs (~23 GB/s).
    d = deploy("llama-3.1-8b", "h100")
    assert d.load_s() - ENGINE_START_S == pytest.approx(4.4, rel=0.02)
    assert d.load_s(23, engine_start_s=0) == pytest.approx(0.7, rel=0.02)
    assert DEFAULT_LOAD_BANDWIDTH_GB_S == pytest.approx(16.06 / 4.4, rel=0.01)


# Catalogue.

def test_unknown_names_list_close_matches() -> None:
    with pytest.raises(CatalogueError, match=r"unknown model 'llama-3-70b'\. Did you mean llama-3\.3-70b"):
        CAT.model("llama-3-70b")
    with pytest.raises(CatalogueError, match=r"Did you mean h100.*Known gpus: a100, h100, h200, l4"):
        CAT.gpu("h10")
    assert CAT.gpu("H100").name == "h100"


def test_user_additions() -> None:
    cat = CAT.with_additions(
        gpus={"b200": {"memory_gb": 192, "bandwidth_tb_s": 8, "bf16_tflops": 2250, "fp8_tflops": 4500}},
        models={"tiny-moe": {"params_b": 4, "active_params_b": 1.5, "layers": 8, "hidden": 1024, "heads": 16,
                             "kv_heads": 4, "max_context": 8192, "vocab": 32000, "experts": 8,
                             "experts_per_token": 2}},
    )
    assert cat.gpu("b200").fp8_tflops == 4500
    assert cat.model("tiny-moe").head_dim == 64
    assert "b200" not in CAT.gpus  # the original is untouched
    Deployment(cat.gpu("b200"), cat.model("tiny-moe"), "fp8").decode_step_s(10, 1)


@pytest.mark.parametrize(("gpus", "models", "message"), [
    ({"b200": {"memory_gb": 192, "bandwidth_tb_s": "fast", "bf16_tflops": 2250}}, None,
     r"gpus\.b200\.bandwidth_tb_s: expected a positive number, got 'fast'"),
    ({"b200": {"memory_gb": 192, "bf16_tflops": 2250}}, None, r"gpus\.b200: missing field\(s\) bandwidth_tb_s"),
    ({"b200": {"memory_gb": 192, "bandwidth_tb_s": 8, "bf16_tflops": 1, "hbm": 3}}, None,
     r"gpus\.b200: unknown field\(s\) hbm"),
    ({"B 200": {"memory_gb": 1, "bandwidth_tb_s": 1, "bf16_tflops": 1}}, None, r"'B 200': a catalogue name"),
    (None, {"m": {"params_b": 1, "layers": 2.5, "hidden": 64, "heads": 4, "kv_heads": 4, "max_context": 8,
                  "vocab": 8}}, r"models\.m\.layers: expected a positive integer, got 2\.5"),
    (None, {"m": {"params_b": 1, "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 3, "max_context": 8,
                  "vocab": 8}}, r"models\.m\.kv_heads: 3 must divide heads"),
    (None, {"m": "big"}, r"models\.m: expected a mapping"),
])
def test_user_additions_validated(gpus: dict | None, models: dict | None, message: str) -> None:
    with pytest.raises(CatalogueError, match=message):
        CAT.with_additions(gpus=gpus, models=models)


def test_builtin_architectures() -> None:
    m = CAT.model("llama-3.1-405b")
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim) == (126, 16384, 128, 8, 128)
    assert CAT.model("llama-3.2-1b").head_dim == 64
    assert CAT.model("qwen2.5-7b").kv_heads == 4
    for name in ("llama-3.1-8b", "llama-3.3-70b", "qwen2.5-7b", "mistral-7b", "mixtral-8x7b"):
        assert CAT.model(name).name == name


# Properties.

DEPLOYMENTS = [deploy("llama-3.1-8b", "h100"), deploy("mixtral-8x7b", "h200", "fp8"),
               deploy("llama-3.3-70b", "h100", "fp8", 2), deploy("qwen2.5-7b", "l4", "int4")]


@given(st.sampled_from(DEPLOYMENTS), st.integers(0, 2_000_000), st.integers(0, 200_000),
       st.integers(1, 512), st.integers(0, 512))
def test_decode_step_monotonic_in_context_and_batch(d: Deployment, ctx: int, more_ctx: int, batch: int,
                                                    more_batch: int) -> None:
    base = d.decode_step_s(ctx, batch)
    assert d.decode_step_s(ctx + more_ctx, batch) >= base
    assert d.decode_step_s(ctx, batch + more_batch) >= base


@given(st.sampled_from(DEPLOYMENTS), st.integers(1, 200_000), st.integers(0, 200_000))
def test_prefill_monotonic_in_tokens(d: Deployment, tokens: int, more: int) -> None:
    assert d.prefill_s(tokens + more) >= d.prefill_s(tokens)
