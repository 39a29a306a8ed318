"""How much GPU memory a vLLM engine reserves, and how many KV blocks that leaves.

vLLM's rule (vllm-project/vllm `vllm/v1/worker/gpu_worker.py`, `vllm/config/cache.py`): requested = total capacity x
`gpu_memory_utilization`; non-KV = weights + the activation peak of a dummy forward pass at
`max_num_batched_tokens` + non-torch memory (cuBLAS workspaces, NCCL); KV = requested - non-KV
(or `kv_cache_memory` when set).

Weights per GPU follow how vLLM shards each operator class (`ModelFamily.weight_bytes_per_gpu`): tensor
parallel for attention, dense MLPs and the vocabulary; whole experts per GPU under expert parallelism
(EP = TP x DP), the MoE's TP spread over TP x DP ranks without it; MLA's latent projections replicated.

The KV cache, as `vllm/v1/core/kv_cache_utils.py` and `vllm/v1/kv_cache_interface.py` size it:
- a layer's page is `block_size` tokens of its K and V: `2 x KV heads per GPU x head size x dtype` bytes per
  token (`AttentionSpec.real_page_size_bytes`); MLA keeps one latent "head" of `kv_lora_rank +
  qk_rope_head_dim` per token, not split by TP (`MLAAttentionSpec`); FP8 KV cache is 1 byte a value;
- layers of one kind form one group (`_get_kv_cache_groups_uniform_spec`); full and sliding-window layers form
  groups of equal size, the smaller kind's count (the larger's when they differ by less than 1.5x), padded
  (`_get_kv_cache_groups_uniform_page_size`); chunked local attention (Llama 4) counts as full attention, since
  vLLM turns the hybrid manager off for it unless `VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE` is set;
- blocks = available // page // layers per group (`get_num_blocks`); the logged `GPU KV cache size` is blocks //
  groups x block_size tokens (`_report_kv_cache_config`); a request of `max_model_len` tokens needs, per group,
  cdiv(max_model_len, block_size) pages for full attention and cdiv(min(window - 1 + max_num_batched_tokens,
  max_model_len), block_size) + 1 for a sliding window (`SlidingWindowSpec.max_memory_usage_bytes`); `Maximum
  concurrency` is blocks over that sum (`get_max_concurrency_for_kv_cache_config`), and the engine refuses to
  start when one such request does not fit (`_check_enough_kv_cache_memory`);
- MLA models take the attention backend's block size unless `blockSize` is set: 64 for FlashMLA on Hopper, 128
  for CUTLASS MLA on Blackwell.

The simulated engine's block pool holds every block, and charges a request the blocks of its full-attention
groups: a sliding-window group's few blocks per request (window / block size + 2 at most) are not charged.

The activation peak is modelled from the shapes of the profile run: the MLP's gate and up projections (2 x
intermediate, or for MoE layers the fused-MoE caches of each token's experts) plus four hidden-size buffers per
batched token, in the model dtype, plus FP32 logits for min(tokens, max_num_seqs) sampled sequences. For
Llama-3-8B at 8,192 tokens and 1,024 sequences that is 1.18 GiB, beside vLLM's logged 1.24 GiB for the same
model. Non-torch memory is the 0.35 GiB vLLM logs for it on one GPU, plus 0.25 GiB of NCCL buffers per GPU
under tensor or data parallelism (an estimate). Not modelled: CUDA-graph memory (captured after the KV cache
is sized, out of the share `gpu_memory_utilization` leaves), expert-parallel all-to-all buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..scenario.models import EngineLimits, Model
from ..scenario.presets import DTYPE_BYTES, GIB, GpuProfile, ModelFamily

NON_TORCH_BYTES = int(0.35 * GIB)
NO_KV_BLOCKS = 2**62
"""Block count of a model without attention (a CNN): its KV cache never limits it."""
NCCL_BYTES_PER_GPU = int(0.25 * GIB)
MLA_BLOCK_SIZE = {"9": 64, "10": 128}
"""Block size of the MLA backend vLLM picks by compute capability's major: FlashMLA (Hopper), CUTLASS MLA (Blackwell)."""


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


def kv_dtype_bytes(arch: ModelFamily, kv_cache_dtype: str = "auto") -> float:
    """Bytes of one cached value: the model dtype for `auto`, one byte for FP8."""
    return DTYPE_BYTES[arch.activation_dtype] if kv_cache_dtype == "auto" else 1


def layer_bytes_per_token(arch: ModelFamily, tensor_parallel: int, kv_cache_dtype: str = "auto") -> int:
    """KV-cache bytes one token takes in one attention layer on one GPU (see the module docstring)."""
    dtype_bytes = kv_dtype_bytes(arch, kv_cache_dtype)
    if arch.mla:
        return int((arch.kv_lora_rank + arch.qk_rope_head_dim) * dtype_bytes)
    return int(arch.kv_heads_per_gpu(tensor_parallel) * (arch.head_dim + arch.value_head_dim) * dtype_bytes)


def kv_bytes_per_token(arch: ModelFamily, tensor_parallel: int, kv_cache_dtype: str = "auto") -> int:
    """KV-cache bytes one token takes on one GPU over every attention layer."""
    if not arch.kv_heads and not arch.mla:
        return 0
    return arch.layers * layer_bytes_per_token(arch, tensor_parallel, kv_cache_dtype)


@dataclass(frozen=True)
class KvGroups:
    """vLLM's KV-cache groups: each group's attention kind (with its window), and the layers per group."""

    kinds: tuple[tuple[str, int], ...]
    """(`full_attention` or `sliding_attention`, window) of each group."""
    group_size: int

    @classmethod
    def of(cls, arch: ModelFamily) -> KvGroups:
        counts: dict[tuple[str, int], int] = {}
        for kind in arch.attention_types:
            key = ("sliding_attention", arch.sliding_window) if kind == "sliding_attention" else ("full_attention", 0)
            counts[key] = counts.get(key, 0) + 1
        if len(counts) == 1:
            (only, layers), = counts.items()
            return cls((only,), layers)
        least, most = min(counts.values()), max(counts.values())
        size = most if most < least * 1.5 else least
        kinds = tuple(kind for kind, layers in counts.items() for _ in range(-(-layers // size)))
        return cls(kinds, size)

    def pages_per_request(self, max_model_len: int, block_size: int, max_num_batched_tokens: int) -> int:
        """Pages one request of `max_model_len` tokens can hold, over every group."""
        pages = 0
        for kind, window in self.kinds:
            if kind == "sliding_attention":
                pages += -(-min(window - 1 + max_num_batched_tokens, max_model_len) // block_size) + 1
            else:
                pages += -(-max_model_len // block_size)
        return pages


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
    """Bytes of one pool block per token: a layer's bytes per token x the layers of a group."""
    block_size: int
    num_blocks: int
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    groups: int = 1
    """KV-cache groups (1 unless full and sliding-window layers are mixed)."""
    pages_per_request: int = 0
    """Blocks a request of `max_model_len` tokens can hold over every group (0: cdiv(max_model_len, block_size))."""

    @property
    def has_kv(self) -> bool:
        """False for models without attention layers, which keep no KV cache."""
        return self.kv_bytes_per_token > 0

    @property
    def non_kv(self) -> int:
        return self.weights + self.activation_peak + self.non_torch

    @property
    def kv_tokens(self) -> int:
        """GPU KV cache size in tokens, as vLLM logs it (blocks // groups x block size)."""
        return self.num_blocks // self.groups * self.block_size

    @property
    def request_blocks(self) -> int:
        """Blocks one request of `max_model_len` tokens needs (vLLM's `num_block_per_request`)."""
        return self.pages_per_request or -(-self.max_model_len // self.block_size)

    @property
    def max_concurrency(self) -> float:
        """How many requests of max_model_len tokens fit at once (`get_max_concurrency_for_kv_cache_config`)."""
        return self.num_blocks / self.request_blocks if self.max_model_len else 0.0

    def fits(self, margin: float) -> bool:
        """Whether one request of `max_model_len` tokens plus `margin` fits in the KV cache."""
        return self.num_blocks >= self.request_blocks * (1 + margin)

    @property
    def kv_needed(self) -> int:
        """Bytes of KV cache one request of `max_model_len` tokens needs (`_max_memory_usage_bytes_from_groups`)."""
        return self.request_blocks * self.block_size * self.kv_bytes_per_token


def activation_tensors(arch: ModelFamily, tokens: int, seqs: int, tensor_parallel: int,
                       expert_parallel: int = 1) -> list[tuple[str, int]]:
    """The live activation tensors of a forward pass over `tokens` tokens, named, in bytes: the
    hidden state and residual, the attention input and output, the MLP's gate and up projections (an MoE
    layer's fused-MoE caches: each token's experts' gate/up output and down output), and the FP32 logits of the
    sampled sequences (none for models that do not generate)."""
    dtype_bytes = DTYPE_BYTES[arch.activation_dtype]
    hidden_pair = int(tokens * 2 * arch.hidden * dtype_bytes / tensor_parallel)
    mlp = int(tokens * 2 * arch.intermediate * dtype_bytes / tensor_parallel) if arch.layers > arch.moe_layers else 0
    if arch.moe_layers:
        moe_tp = 1 if expert_parallel > 1 else tensor_parallel
        mlp = max(mlp, int(tokens * arch.experts_per_token * (3 * arch.expert_intermediate / moe_tp + arch.hidden)
                           * dtype_bytes))
    logits = min(tokens, seqs) * arch.vocab * 4 if arch.task == "generate" else 0
    named = (("hidden", hidden_pair), ("attention", hidden_pair), ("mlp", mlp), ("logits", logits))
    return [(name, size) for name, size in named if size]


def activation_peak(arch: ModelFamily, tokens: int, seqs: int, tensor_parallel: int, expert_parallel: int = 1) -> int:
    """Peak activation bytes of vLLM's profile run (see the module docstring)."""
    return sum(size for _, size in activation_tensors(arch, tokens, seqs, tensor_parallel, expert_parallel))


def block_size(model: Model, arch: ModelFamily, gpu: GpuProfile, limits: EngineLimits) -> int:
    """The KV block size: the scenario's, else the MLA backend's on this GPU (see the module docstring)."""
    if arch.mla and "block_size" not in limits.model_fields_set:
        return MLA_BLOCK_SIZE.get(gpu.compute_capability.split(".")[0], limits.block_size)
    return limits.block_size


def plan(model: Model, gpu: GpuProfile, limits: EngineLimits | None = None, tensor_parallel: int | None = None) -> MemoryPlan:
    """Size the KV cache of `model` on `gpu` the way vLLM's memory profiling does."""
    limits = limits or model.engine
    tp = tensor_parallel or (model.placement.tensor_parallel if model.placement else 1)
    arch = model.resolved()
    ep = model.expert_parallel_size()
    default_tokens, default_seqs = default_limits(gpu, limits.entrypoint)
    tokens = limits.max_num_batched_tokens or default_tokens
    seqs = limits.max_num_seqs or default_seqs
    max_len = limits.max_model_len or arch.max_position or tokens
    requested = int(gpu.capacity * limits.gpu_memory_utilization)
    weights = arch.weight_bytes_per_gpu(tp, ep) if not model.mock else model.weight_bytes() // tp
    activations = activation_peak(arch, tokens, seqs, tp, ep)
    parallel = tp > 1 or model.data_parallel_size() > 1
    non_torch = NON_TORCH_BYTES + (NCCL_BYTES_PER_GPU if parallel else 0)
    per_layer = layer_bytes_per_token(arch, tp, limits.kv_cache_dtype) if kv_bytes_per_token(arch, tp) else 0
    groups = KvGroups.of(arch)
    size = block_size(model, arch, gpu, limits)
    if limits.kv_cache_memory is not None:
        available = limits.kv_cache_memory
    else:
        available = requested - weights - activations - non_torch
    page = per_layer * size
    blocks = max(0, available // page // groups.group_size) if page else NO_KV_BLOCKS
    return MemoryPlan(gpu.capacity, requested, weights, activations, non_torch, available,
                      per_layer * groups.group_size, size, int(blocks), tokens, seqs, max_len, len(groups.kinds),
                      groups.pages_per_request(max_len, size, tokens))
