"""How much GPU memory a vLLM engine reserves, and how many KV blocks that leaves.

vLLM's rule (`shared/reference/gpu-memory-and-streams.md` §4.2): requested = total capacity x
`gpu_memory_utilization`; non-KV = weights + the activation peak of a dummy forward pass at
`max_num_batched_tokens` + non-torch memory (cuBLAS workspaces, NCCL); KV = requested - non-KV
(or `kv_cache_memory` when set); blocks = KV // (block_size x KV bytes per token per GPU).

The activation peak is modelled from the shapes of the profile run: the MLP's gate and up
projections (2 x intermediate) plus four hidden-size buffers per batched token, in the model
dtype, plus FP32 logits for min(tokens, max_num_seqs) sampled sequences. For Llama-3-8B at 8,192
tokens and 1,024 sequences that is 1.18 GiB, beside vLLM's logged 1.24 GiB for the same model.
Non-torch memory is the 0.35 GiB vLLM logs for it on one GPU, plus 0.25 GiB of NCCL buffers per
GPU under tensor parallelism (an estimate).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..scenario.models import EngineLimits, Model
from ..scenario.presets import DTYPE_BYTES, GIB, GpuProfile, ModelFamily

NON_TORCH_BYTES = int(0.35 * GIB)
NO_KV_BLOCKS = 2**62
"""Block count of a model without attention (a CNN): its KV cache never limits it."""
NCCL_BYTES_PER_GPU = int(0.25 * GIB)


def default_limits(gpu: GpuProfile, entrypoint: str = "server") -> tuple[int, int]:
    """vLLM's defaults: (max_num_batched_tokens, max_num_seqs) for this GPU class and entrypoint.

    `EngineArgs.get_batch_defaults`: the API server takes 8,192 tokens and 1,024 sequences on GPUs
    with at least 70 GiB whose name is not an A100, 2,048 and 256 otherwise; the offline `LLM` class
    16,384 and 1,024, or 8,192 and 256.
    """
    large = gpu.capacity >= 70 * GIB and "A100" not in gpu.name.upper()
    if entrypoint == "offline":
        return (16384, 1024) if large else (8192, 256)
    return (8192, 1024) if large else (2048, 256)


def kv_bytes_per_token(arch: ModelFamily, tensor_parallel: int, kv_cache_dtype: str = "auto") -> int:
    """KV-cache bytes one token takes on one GPU: 2 x layers x KV heads / TP x head_dim x dtype bytes."""
    dtype_bytes = DTYPE_BYTES[arch.dtype] if kv_cache_dtype == "auto" else 1
    kv_heads = max(1, arch.kv_heads // tensor_parallel) if arch.kv_heads else 0
    return int(2 * arch.layers * kv_heads * arch.head_dim * dtype_bytes)


@dataclass(frozen=True)
class MemoryPlan:
    """The memory profile of one engine replica on one GPU, in bytes."""

    capacity: int
    requested: int
    weights: int
    activation_peak: int
    non_torch: int
    kv_available: int
    kv_bytes_per_token: int
    block_size: int
    num_blocks: int
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int

    @property
    def has_kv(self) -> bool:
        """False for models without attention layers, which keep no KV cache."""
        return self.kv_bytes_per_token > 0

    @property
    def non_kv(self) -> int:
        return self.weights + self.activation_peak + self.non_torch

    @property
    def kv_tokens(self) -> int:
        """GPU KV cache size in tokens."""
        return self.num_blocks * self.block_size

    @property
    def max_concurrency(self) -> float:
        """How many requests of max_model_len tokens fit at once."""
        return self.kv_tokens / self.max_model_len if self.max_model_len else 0.0


def activation_tensors(arch: ModelFamily, tokens: int, seqs: int, tensor_parallel: int) -> list[tuple[str, int]]:
    """The live activation tensors of a forward pass over `tokens` tokens, named, in bytes: the
    hidden state and residual, the attention input and output, the MLP's gate and up projections,
    and the FP32 logits of the sampled sequences (none for models that do not generate)."""
    dtype_bytes = DTYPE_BYTES[arch.dtype]
    hidden_pair = int(tokens * 2 * arch.hidden * dtype_bytes / tensor_parallel)
    mlp = int(tokens * 2 * arch.intermediate * dtype_bytes / tensor_parallel)
    logits = min(tokens, seqs) * arch.vocab * 4 if arch.task == "generate" else 0
    named = (("hidden", hidden_pair), ("attention", hidden_pair), ("mlp", mlp), ("logits", logits))
    return [(name, size) for name, size in named if size]


def activation_peak(arch: ModelFamily, tokens: int, seqs: int, tensor_parallel: int) -> int:
    """Peak activation bytes of vLLM's profile run (see the module docstring)."""
    return sum(size for _, size in activation_tensors(arch, tokens, seqs, tensor_parallel))


def plan(model: Model, gpu: GpuProfile, limits: EngineLimits | None = None, tensor_parallel: int | None = None) -> MemoryPlan:
    """Size the KV cache of `model` on `gpu` the way vLLM's memory profiling does."""
    limits = limits or model.engine
    tp = tensor_parallel or (model.placement.tensor_parallel if model.placement else 1)
    arch = model.resolved()
    default_tokens, default_seqs = default_limits(gpu, limits.entrypoint)
    tokens = limits.max_num_batched_tokens or default_tokens
    seqs = limits.max_num_seqs or default_seqs
    max_len = limits.max_model_len or arch.max_position or tokens
    requested = int(gpu.capacity * limits.gpu_memory_utilization)
    weights = model.weight_bytes() // tp
    activations = activation_peak(arch, tokens, seqs, tp)
    non_torch = NON_TORCH_BYTES + (NCCL_BYTES_PER_GPU if tp > 1 else 0)
    per_token = kv_bytes_per_token(arch, tp, limits.kv_cache_dtype)
    if limits.kv_cache_memory is not None:
        available = limits.kv_cache_memory
    else:
        available = requested - weights - activations - non_torch
    block_bytes = per_token * limits.block_size
    blocks = max(0, available // block_bytes) if block_bytes else NO_KV_BLOCKS
    return MemoryPlan(gpu.capacity, requested, weights, activations, non_torch, available, per_token,
                      limits.block_size, int(blocks), tokens, seqs, max_len)
