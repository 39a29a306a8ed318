"""`aisim memory` for four current deployments, against vLLM's formulas worked out here by hand from the configs.

The formulas (`vllm/v1/core/kv_cache_utils.py`, `vllm/v1/kv_cache_interface.py`):
- available KV memory = capacity x gpu_memory_utilization - weights - activation peak - non-torch memory;
- a layer's page = block_size x (K + V bytes per token per GPU); MLA: block_size x (kv_lora_rank + qk_rope_head_dim)
  x dtype, one latent "head", not split by TP;
- blocks = available // page // layers per KV-cache group (`get_num_blocks`);
- `GPU KV cache size` = blocks // groups x block_size (`_report_kv_cache_config`);
- `Maximum concurrency` = blocks / pages one max_model_len request holds: cdiv(max_model_len, block_size) per
  full-attention group, cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block_size) + 1 per
  sliding-window group (`get_max_concurrency_for_kv_cache_config`).

Weights are counted module by module from the config, in the checkpoint's formats (FP8 blocks of 128 x 128 with an
FP32 scale each: 1 + 4 / 16384 bytes a weight; MXFP4: 0.5 + 1 / 32); the activation peak and non-torch memory are
aisim's model (`engine/memory.py`: hidden-state pairs, the MLP's or the fused MoE's intermediates, FP32 logits;
0.35 GiB plus 0.25 GiB of NCCL buffers under parallelism), written out here too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from math import ceil

import pytest

from aisim.scenario.presets import GIB, GPU_PROFILES

from .conftest import ROOT

CONFIGS = ROOT / "aisim" / "scenario" / "configs"
FP8_BLOCK = 1 + 4 / (128 * 128)
MXFP4 = 0.5 + 1 / 32
TOKENS, SEQS = 8192, 1024
"""vLLM's server defaults on GPUs of 70 GiB and more."""


def _memory(*args: str) -> dict[str, object]:
    run = subprocess.run([sys.executable, "-m", "aisim", "memory", *args, "--json"], capture_output=True, text=True, cwd=ROOT,
                         check=False)
    assert run.stderr == "", run.stderr
    [result] = json.loads(run.stdout)
    return result


def _non_torch(parallel: bool) -> int:
    return int(0.35 * GIB) + (int(0.25 * GIB) if parallel else 0)


def _expect(result: dict[str, object], gpu: str, weights: int, activations: int, parallel: bool, page: int,
            group_layers: int, groups: int, request_pages: int, block: int) -> None:
    available = int(GPU_PROFILES[gpu].capacity * 0.9) - weights - activations - _non_torch(parallel)
    blocks = available // page // group_layers
    assert result["weights"] == weights
    assert result["activation_peak"] == activations
    assert result["kv_available"] == available
    assert (result["block_size"], result["num_blocks"]) == (block, blocks)
    assert result["kv_tokens"] == blocks // groups * block
    assert result["max_concurrency"] == round(blocks / request_pages, 2)


def test_llama_3_1_70b_fp8_on_two_h100() -> None:
    """ModelOpt FP8 (per-tensor, W8A8) everywhere but the embedding and the LM head; TP 2 splits everything."""
    h, layers, inter, vocab, heads, kv, hd = 8192, 80, 28672, 128256, 64, 8, 128
    linear = layers * (h * (heads + 2 * kv) * hd + heads * hd * h + 3 * h * inter)  # FP8: a byte each
    bf16 = 2 * (2 * vocab * h + h + 2 * h * layers)  # embedding, LM head, norms
    weights = (linear + bf16) // 2
    activations = 2 * int(TOKENS * 2 * h * 2 / 2) + int(TOKENS * 2 * inter * 2 / 2) + SEQS * vocab * 4
    page = 16 * (kv // 2) * 2 * hd * 2  # bf16 KV cache (`auto`: the model dtype)
    result = _memory("--config", str(CONFIGS / "nvidia--Llama-3.1-70B-Instruct-FP8_config.json"), "--gpu", "H100-SXM",
                     "--tensor-parallel", "2")
    _expect(result, "H100-SXM", weights, activations, True, page, layers, 1, ceil(131072 / 16), 16)
    assert result["fits"] is True


def test_qwen3_235b_fp8_on_four_h200_with_expert_parallelism() -> None:
    """FP8 blocks on attention and experts; EP = TP 4 puts 32 whole experts on each GPU; the routers stay BF16 on
    every GPU; the 4 KV heads split one per GPU."""
    h, layers, heads, kv, hd, experts, moe, vocab, k = 4096, 94, 64, 4, 128, 128, 1536, 151936, 8
    attention = round(layers * (h * (heads + 2 * kv) * hd + heads * hd * h) * FP8_BLOCK)
    expert_bytes = round(layers * experts * 3 * h * moe * FP8_BLOCK)
    bf16 = 2 * (2 * vocab * h + h + layers * (2 * h + 2 * hd))  # embedding, LM head, norms and Q/K norms
    router = 2 * layers * h * experts
    weights = (attention + bf16) // 4 + expert_bytes * 32 // 128 + router
    activations = 2 * int(TOKENS * 2 * h * 2 / 4) + int(TOKENS * k * (3 * moe / 1 + h) * 2) + SEQS * vocab * 4
    page = 16 * 1 * 2 * hd * 2
    result = _memory("--config", str(CONFIGS / "Qwen--Qwen3-235B-A22B-FP8_config.json"), "--gpu", "H200",
                     "--tensor-parallel", "4", "--enable-expert-parallel")
    _expect(result, "H200", weights, activations, True, page, layers, 1, ceil(40960 / 16), 16)


def test_deepseek_v3_fp8_on_eight_h200() -> None:
    """MLA: one 576-value latent per token and layer on every GPU (block size 64: FlashMLA on Hopper); the latent
    down-projections and routers replicated, everything else split by TP 8."""
    h, layers, heads, q_lora, kv_lora, rope, nope, v = 7168, 61, 128, 1536, 512, 64, 128, 128
    inter, moe, experts, vocab, k, dense = 18432, 2048, 256, 129280, 8, 3
    latent = round(layers * (h * q_lora + h * (kv_lora + rope)) * FP8_BLOCK)
    attention = round(layers * (q_lora * heads * (nope + rope) + kv_lora * heads * (nope + v) + heads * v * h) * FP8_BLOCK)
    mlp = round(dense * 3 * h * inter * FP8_BLOCK)
    expert_bytes = round((layers - dense) * experts * 3 * h * moe * FP8_BLOCK)
    shared = round((layers - dense) * 3 * h * moe * FP8_BLOCK)
    bf16 = 2 * (2 * vocab * h + h + layers * (2 * h + q_lora + kv_lora))
    router = 2 * (layers - dense) * h * experts
    weights = (attention + mlp + expert_bytes + shared + bf16) // 8 + latent + router
    activations = (2 * int(TOKENS * 2 * h * 2 / 8) + max(int(TOKENS * 2 * inter * 2 / 8), int(TOKENS * k * (3 * moe / 8 + h) * 2))
                   + SEQS * vocab * 4)
    page = 64 * (kv_lora + rope) * 2
    result = _memory("--config", str(CONFIGS / "deepseek-ai--DeepSeek-V3_config.json"), "--gpu", "H200",
                     "--tensor-parallel", "8")
    _expect(result, "H200", weights, activations, True, page, layers, 1, ceil(163840 / 64), 64)


def test_gpt_oss_120b_on_one_h100() -> None:
    """MXFP4 experts, BF16 attention (with biases and sinks), router and head; 18 sliding-window layers (128 tokens)
    and 18 full ones: two KV-cache groups of 18 layers sharing one block pool."""
    h, layers, heads, kv, hd, experts, inter, vocab, k, window = 2880, 36, 64, 8, 64, 128, 2880, 201088, 4, 128
    expert_bytes = round(layers * experts * 3 * h * inter * MXFP4)
    attention = layers * (h * (heads + 2 * kv) * hd + (heads + 2 * kv) * hd + heads * hd * h + h)
    rest = 2 * vocab * h + h + layers * (2 * h + heads + experts * (3 * inter) + h * experts + experts)
    weights = expert_bytes + 2 * (attention + rest)  # norms, sinks, expert and router biases, router: BF16
    activations = 2 * int(TOKENS * 2 * h * 2) + int(TOKENS * k * (3 * inter + h) * 2) + SEQS * vocab * 4
    page = 16 * kv * 2 * hd * 2
    pages = ceil(131072 / 16) + ceil(min(window - 1 + TOKENS, 131072) / 16) + 1
    result = _memory("--model", "gpt-oss-120b", "--gpu", "H100-SXM")
    _expect(result, "H100-SXM", weights, activations, False, page, 18, 2, pages, 16)


@pytest.mark.parametrize("kv_dtype", ["auto", "fp8"])
def test_an_fp8_kv_cache_holds_twice_the_tokens(kv_dtype: str) -> None:
    result = _memory("--model", "llama-3.1-8b", "--gpu", "H100-SXM", "--kv-cache-dtype", kv_dtype)
    assert result["kv_bytes_per_token"] == 32 * 8 * 2 * 128 * (2 if kv_dtype == "auto" else 1)
