"""Decode-side GPU terms of the cost model that vLLM's served runs differ on from a plain table read (issue 37):
the MoE table's routing, the MLA decode module across sibling systems, and FlashInfer's fused all-reduce."""

from __future__ import annotations

import numpy as np
import pytest

from aisim.engine.costmodel.kernels import KernelTables
from aisim.engine.costmodel.step_kernels import MOE_ROUTING, StepKernels, mla_siblings
from aisim.scenario.presets import GPU_PROFILES, MODEL_FAMILIES


def test_the_fused_moe_is_read_at_power_law_routing_not_balanced() -> None:
    """AIConfigurator's estimator reads its MoE table at `power_law_1.01` routing; balanced routing spreads 64 tokens
    x top-8 over every expert and reads all their weights, 1.4x the skewed slice at decode sizes."""
    arch = MODEL_FAMILIES["kimi-k2.5-nvfp4"]
    kernels = StepKernels(arch, GPU_PROFILES["B200"], tp=4)
    tables = KernelTables.for_system("b200_sxm")
    t = np.array([64.0])
    shape = (kernels.moe_dtype, 64, arch.hidden, arch.expert_intermediate, arch.experts_per_token, arch.experts, 4, 1)
    skewed = float(tables.moe(*shape, distribution="power_law_1.01"))
    balanced = float(tables.moe(*shape, distribution="balanced"))
    assert MOE_ROUTING == "power_law_1.01"
    assert balanced > 1.3 * skewed
    router = float(kernels._gemm["dense"](t, arch.experts, arch.hidden)[0])
    up, down = kernels.shared
    shared = float((kernels._gemm["shared"](t, *up) + kernels._gemm["shared"](t, *down))[0])
    assert float(kernels._moe_s(t)[0]) == pytest.approx(skewed + router + shared)


def test_a_gpu_without_skewed_moe_slices_reads_the_balanced_ones() -> None:
    """A100's MoE table has skewed routing only and L40S both; a system with only balanced slices still answers."""
    tables = KernelTables.for_system("b200_sxm")
    assert tables._own_keys("moe", {"dtype": "nvfp4", "distribution": MOE_ROUTING}) is not None
    kernels = StepKernels(MODEL_FAMILIES["qwen3-30b-a3b"], GPU_PROFILES["A100-80GB"], tp=1)
    assert float(kernels._moe_s(np.array([16.0]))[0]) > 0


def test_mla_decode_is_no_slower_than_a_sibling_systems_measurement() -> None:
    """B300's MLA decode module table (vLLM 0.24) is 2x B200's for the same FlashInfer-MLA source, though B300 has
    B200's memory bandwidth; the served Kimi-K2.5 runs on B300 decode as fast as on B200. B300 is priced at the
    fastest of its own table and its siblings' moved to B300 by the roofline; B200 stays within 10 % of its own."""
    arch = MODEL_FAMILIES["kimi-k2.5-nvfp4"]
    b200 = StepKernels(arch, GPU_PROFILES["B200"], tp=4, kv_dtype="fp8")
    b300 = StepKernels(arch, GPU_PROFILES["B300"], tp=4, kv_dtype="fp8")
    own = KernelTables.for_system("b300_sxm").mla_generation(4, 1024, b300.heads, "fp8", "nvfp4")
    assert float(b300.decode_attention_s(4, 1024)) < 0.7 * b300.layers * float(own)
    assert float(b300.decode_attention_s(4, 1024)) == pytest.approx(float(b200.decode_attention_s(4, 1024)), rel=0.15)
    b200_own = KernelTables.for_system("b200_sxm").mla_generation(4, 1024, b200.heads, "fp8", "nvfp4")
    assert 0.9 * b200.layers * float(b200_own) <= float(b200.decode_attention_s(4, 1024)) <= b200.layers * float(b200_own)
    siblings = {t.base_system for t in mla_siblings(KernelTables.for_system("b300_sxm"))}
    assert siblings == {"b200_sxm", "gb200", "gb300"}
    assert {t.base_system for t in mla_siblings(KernelTables.for_system("h200_sxm"))} == {"h100_sxm"}


def test_a_tp_all_reduce_before_an_rmsnorm_is_flashinfers_fused_kernel_up_to_its_limit() -> None:
    """vLLM (0.16+) runs an all-reduce followed by residual add + RMSNorm as FlashInfer's fused kernel up to
    `FI_ALLREDUCE_FUSION_MAX_SIZE_MB` (Blackwell TP 8: 1 MiB): the custom all-reduce's one-shot bump at 256-512 KiB
    on eight B200s (26 us) is not what a decode step pays, and the fused kernel is never slower than the table's all-reduce
(at 1 MiB the table's two-shot 17 us beats a one-shot push at the table's bus bandwidth). Beyond the limit, with data parallelism, or on Ampere,
    the all-reduce is the table's."""
    arch = MODEL_FAMILIES["llama-3.1-70b-fp8"]
    kernels = StepKernels(arch, GPU_PROFILES["B200"], tp=8)
    tables = KernelTables.for_system("b200_sxm")
    sizes = np.array([256 * 2**10, 512 * 2**10, 4 * 2**20, 2**20])
    graph = np.array([True] * 4)
    table = np.asarray(tables.allreduce(sizes, 8, True))
    fused = kernels._allreduce(sizes, graph, fused=True)
    floor, bus = tables.allreduce_bus(8)
    assert floor == pytest.approx(tables.floor("allreduce", {"mode": "graph", "gpus": 8}))
    assert fused[:2] == pytest.approx(floor + 7 * sizes[:2] / bus)
    assert np.all(fused[:2] < 0.5 * table[:2])
    assert fused[2:] == pytest.approx(table[2:])
    assert kernels._allreduce(sizes, graph) == pytest.approx(table)
    with_dp = StepKernels(MODEL_FAMILIES["qwen3-30b-a3b"], GPU_PROFILES["B200"], tp=4, ep=8, dp=2)
    assert with_dp._allreduce(sizes, graph, fused=True) == pytest.approx(tables.allreduce(sizes, 4, True))
    ampere = StepKernels(arch, GPU_PROFILES["A100-80GB"], tp=8)
    assert ampere._allreduce(sizes, graph, fused=True) == pytest.approx(ampere._allreduce(sizes, graph))


def test_a_tp8_decode_step_prices_the_fused_all_reduces() -> None:
    """A decode step of 24 tokens on eight B200s: 161 all-reduces of 384 KiB, fused, not 4 ms of the table's."""
    kernels = StepKernels(MODEL_FAMILIES["llama-3.1-70b-fp8"], GPU_PROFILES["B200"], tp=8)
    t, graph = np.array([24.0]), np.array([True])
    fused = float(kernels.tokens_s(t, graph)[0])
    table = 2 * kernels.layers + 1
    unfused = fused + table * float(kernels._allreduce(t * kernels.hidden * 2, graph)[0] -
                                    kernels._allreduce(t * kernels.hidden * 2, graph, fused=True)[0])
    assert unfused - fused > 2e-3


def test_a_sliding_window_layer_decodes_at_its_requests_context_length_not_the_windows() -> None:
    """The `generation_attention` table times a sliding-window layer at the request's context length (the
    collector's `isl + step`). On H100 (vLLM's FlashAttention 3) gpt-oss's 128-token window costs 1.3-1.45x more at
    a 2,048-token context than at a 128-token one, so a decode step reads the window's slice at the requests' KV
    length: reading it at the window's length (as before) priced every gpt-oss decode step on Hopper 60-700 us
    fast."""
    arch = MODEL_FAMILIES["gpt-oss-120b"]
    kernels = StepKernels(arch, GPU_PROFILES["H100-SXM"], tp=4)
    (full, none), (sliding, window) = kernels.attention_layers[0], kernels.attention_layers[-1]
    assert (none, window) == (0, 128) and full == sliding == 18
    tables = KernelTables.for_system("h100_sxm")

    def layer(batch: int, kv_len: int, window: int) -> float:
        return float(tables.generation_attention(batch, kv_len, kernels.heads, kernels.kv_heads, 64, "bfloat16", window))

    for batch in (1, 64, 256):
        assert layer(batch, 2048, 128) > 1.25 * layer(batch, 128, 128)  # the measured plateau past the window
        expected = full * layer(batch, 2048, 0) + sliding * layer(batch, 2048, 128)
        assert float(kernels.decode_attention_s(batch, 2048)) == pytest.approx(expected, rel=1e-9)
    # within the window a sliding layer costs what a full-attention layer does at that length
    assert float(kernels.decode_attention_s(64, 100)) == pytest.approx(36 * layer(64, 100, 0), rel=0.1)
