"""A served model's architecture as vLLM builds it: the numbers of its Hugging Face `config.json`, the layer
pattern (which layers are MoE, which attend over a sliding window), its attention kind (grouped-query or
multi-head latent), and the weight format of each operator class.

`ModelFamily` is the one architecture type: the built-in families, a `config.json` (`hfconfig.py`) and an
explicit `architecture:` block all resolve to it, and the memory model and the cost model read it. Its
weights are counted by module (`weight_groups`): each group has an operator class (`role`), a parameter count,
its bytes with quantization scales, and its format, so the bytes a GPU holds follow how vLLM shards each class
(tensor parallel, expert parallel, replicated).

Operator classes (`Role`), and how vLLM shards them:
- `embedding`: `VocabParallelEmbedding`, split by TP; `lm_head`: `ParallelLMHead`, split by TP (shared with the
  embedding when tied);
- `attention`: the Q/K/V and output projections, split by TP (K and V replicated once TP exceeds the KV heads,
  `QKVParallelLinear`); `attention_latent`: MLA's down-projections (`q_a_proj`, `kv_a_proj_with_mqa`) and their
  norms, `ReplicatedLinear` on every TP rank (`vllm/model_executor/models/deepseek_v2.py`);
- `dense`: the MLP of a dense layer, split by TP; `shared`: an MoE layer's shared experts, split by TP;
- `experts`: the routed experts (`FusedMoE`), split by the MoE's TP size, or by expert parallelism;
- `router`: the gate's weights, replicated; `norm`: norms and sinks (counted as split by TP: they are tiny);
  `vision`: a multimodal model's encoder (approximate: its transformer blocks and projector), split by TP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

DType = Literal["fp32", "fp16", "bf16", "fp8", "int8", "int4"]
DTYPE_BYTES: dict[str, float] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
Task = Literal["generate", "embed", "classify"]

Role = Literal["embedding", "lm_head", "attention", "attention_latent", "dense", "shared", "experts", "router",
               "norm", "vision"]
WeightFormat = Literal["fp32", "fp16", "bf16", "fp8", "fp8_block", "fp8_wo", "int8", "int8_wo", "int4_wo", "nvfp4",
                       "nvfp4_wo", "mxfp4"]
"""How a linear layer's weights are stored and multiplied (the kernel table a cost model picks):

| format | weights | activations | AIConfigurator's table |
| --- | --- | --- | --- |
| `bf16`, `fp16`, `fp32` | unquantized | same | `bfloat16` |
| `fp8` | FP8 e4m3, per-tensor or per-channel scale | FP8 (W8A8) | `fp8` |
| `fp8_block` | FP8 e4m3, one FP32 scale per 128x128 block | FP8, per 1x128 group | `fp8_block` |
| `fp8_wo` | FP8, upcast in the kernel (vLLM's Marlin FP8 on Ampere) | BF16 | - |
| `int8` | INT8, per-channel | INT8 (W8A8) | - |
| `int8_wo`, `int4_wo` | INT8 / INT4, group scales (AWQ, GPTQ, compressed-tensors W4A16) | BF16 | `int4_wo` |
| `nvfp4` | FP4 e2m1, one FP8 scale per 16 | FP4 (W4A4, Blackwell) | `nvfp4` |
| `nvfp4_wo` | NVFP4, upcast in the kernel (vLLM's Marlin FP4 before Blackwell) | BF16 | - |
| `mxfp4` | FP4 e2m1, one E8M0 scale per 32 | BF16 on Hopper (Marlin / Triton) | `w4a16_mxfp4` |
"""

LINEAR_ROLES: frozenset[str] = frozenset({"attention", "attention_latent", "dense", "shared", "experts", "lm_head"})
"""Operator classes that are linear layers (GEMMs): what a quantization method can quantize."""

AttentionType = Literal["full_attention", "sliding_attention", "chunked_attention"]


class ConfigError(ValueError):
    """A model config aisim cannot read or model: the file, the key (a dotted path into the JSON) and why."""

    def __init__(self, path: str, key: str, message: str) -> None:
        self.path, self.key, self.reason = path, key, message
        where = f"{path}: " if path else ""
        super().__init__(f"{where}{key}: {message}" if key else f"{where}{message}")


@dataclass(frozen=True)
class WeightGroup:
    """Weights of one operator class in one format."""

    role: Role
    params: int
    bytes: int
    """Bytes with the format's scales (block, group or per-16 scales)."""
    format: str


@dataclass(frozen=True)
class ModelFamily:
    """Architecture numbers of a model (the Hugging Face `config.json` of the checkpoint, as vLLM reads it).

    The first fields are those every family has had; the rest default to a dense, full-attention, unquantized
    model, so a hand-written family or an explicit `architecture:` block describes what it did before.
    """

    name: str
    task: Task
    params: int
    """Every parameter vLLM loads (the encoder of a multimodal model included, multi-token-prediction layers not)."""
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    """Key/value heads (GQA); for MLA the attention heads (each head's K and V come from the shared latent)."""
    head_dim: int
    """Query/key head size; for MLA `qk_nope_head_dim + qk_rope_head_dim`."""
    intermediate: int
    """MLP size of a dense layer."""
    vocab: int
    max_position: int
    dtype: DType = "bf16"
    """The checkpoint's dtype (`torch_dtype`): activations, unquantized weights and the `auto` KV cache."""
    experts: int = 1
    """Routed experts per MoE layer (1: dense)."""
    experts_per_token: int = 1
    active_params: int | None = None
    """Parameters touched per text token (MoE: the routed experts it goes to); `params` less a multimodal encoder
    for dense models."""
    flops_per_sample: int | None = None
    """Forward FLOPs per input sample for non-token models (CNNs)."""
    default_runtime: Literal["vllm", "tensorrt", "onnxruntime", "python"] = "vllm"
    huggingface_id: str = ""
    # -- MoE ---------------------------------------------------------------------------------
    moe_intermediate: int = 0
    """Intermediate size of one routed expert (0: `intermediate`)."""
    shared_experts: int = 0
    """Shared experts every token goes through (DeepSeek's `n_shared_experts`)."""
    shared_intermediate: int = 0
    """Intermediate size of the shared experts together (0: none)."""
    dense_layers: tuple[int, ...] = ()
    """Layers of an MoE model with a dense MLP (DeepSeek's `first_k_dense_replace`, Qwen's `mlp_only_layers`)."""
    # -- attention ---------------------------------------------------------------------------
    q_lora_rank: int = 0
    """MLA: rank of the query's down-projection (0: a full query projection)."""
    kv_lora_rank: int = 0
    """MLA: rank of the compressed key/value latent (0: not MLA)."""
    qk_rope_head_dim: int = 0
    """MLA: the rotary part of a query/key head (stored in the cache beside the latent)."""
    qk_nope_head_dim: int = 0
    """MLA: the non-rotary part of a query/key head."""
    v_head_dim: int = 0
    """Value head size when it differs from `head_dim` (MLA); 0: `head_dim`."""
    layer_types: tuple[AttentionType, ...] = ()
    """Attention of each layer; empty: every layer full attention."""
    sliding_window: int = 0
    """Tokens a `sliding_attention` layer attends to."""
    attention_chunk: int = 0
    """Tokens of a `chunked_attention` layer's chunk (Llama 4's local attention)."""
    sinks: bool = False
    """Learned attention sinks (gpt-oss): one logit per head per layer."""
    attention_bias: bool = False
    """Biases on Q/K/V (Qwen2, gpt-oss) and the output projection (gpt-oss)."""
    # -- weights -----------------------------------------------------------------------------
    tied_embeddings: bool = False
    """The LM head shares the embedding's weights."""
    vision_params: int = 0
    """Parameters of a multimodal model's encoder and projector (approximate; part of `params`)."""
    weight_groups: tuple[WeightGroup, ...] = ()
    """Weights by operator class and format; empty: `params` in `dtype` (a hand-written family)."""
    quantization: str = ""
    """vLLM's quantization method (`fp8`, `modelopt`, `compressed-tensors`, `mxfp4`, ...); '' unquantized."""
    kv_cache_quantization: str = ""
    """A KV-cache format the checkpoint was calibrated for (ModelOpt's `kv_cache_quant_algo`); informative."""
    architecture: str = ""
    """The Hugging Face class (`architectures[0]`, the language model's for a multimodal wrapper)."""
    source: str = ""
    """Where the numbers come from: a config file's path, or '' for a built-in family."""
    notes: tuple[str, ...] = field(default=(), compare=False)
    """What aisim approximates or leaves out for this model (shown by `aisim memory`)."""

    # -- derived -----------------------------------------------------------------------------

    @property
    def mla(self) -> bool:
        """Multi-head latent attention (DeepSeek V2/V3, Kimi K2)."""
        return self.kv_lora_rank > 0

    @property
    def moe(self) -> bool:
        return self.experts > 1

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return self.layers - len(self.dense_layers) if self.moe else 0

    @property
    def expert_intermediate(self) -> int:
        """Intermediate size of one routed expert."""
        return self.moe_intermediate or self.intermediate

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    @property
    def attention_types(self) -> tuple[AttentionType, ...]:
        """Each layer's attention (full attention where the config gives no pattern)."""
        full: AttentionType = "full_attention"
        return self.layer_types or (full,) * self.layers

    @property
    def activation_dtype(self) -> DType:
        """The dtype activations and the `auto` KV cache take: a legacy `dtype: fp8/int8/int4` meant the weights."""
        return self.dtype if self.dtype in ("fp32", "fp16", "bf16") else "bf16"

    def format_of(self, role: Role) -> str:
        """The weight format of an operator class: that of most of its parameters (the model dtype if it has none)."""
        groups = [g for g in self.weight_groups if g.role == role]
        if not groups:
            return self.dtype if not self.weight_groups else self.activation_dtype
        return max(groups, key=lambda g: g.params).format

    def linear_bytes_per_param(self) -> float:
        """Bytes per weight of the linear layers (GEMM weight traffic), scales included."""
        groups = [g for g in self.weight_groups if g.role in LINEAR_ROLES]
        if not groups:
            return DTYPE_BYTES[self.dtype]
        return sum(g.bytes for g in groups) / max(sum(g.params for g in groups), 1)

    def low_precision_compute(self) -> bool:
        """Whether most linear weights multiply on FP8 (or faster) tensor cores (W8A8, W4A4), not in the model dtype."""
        if not self.weight_groups:
            return self.dtype in ("fp8", "int8", "int4")
        groups = [g for g in self.weight_groups if g.role in LINEAR_ROLES]
        fast = sum(g.params for g in groups if g.format in ("fp8", "fp8_block", "int8", "nvfp4"))
        return fast * 2 > sum(g.params for g in groups)

    def role_bytes(self, role: Role) -> int:
        return sum(g.bytes for g in self.weight_groups if g.role == role)

    def role_params(self, role: Role) -> int:
        return sum(g.params for g in self.weight_groups if g.role == role)

    def weight_bytes(self) -> int:
        """Bytes of every weight (with quantization scales)."""
        if not self.weight_groups:
            return int(self.params * DTYPE_BYTES[self.dtype])
        return sum(g.bytes for g in self.weight_groups)

    def kv_heads_per_gpu(self, tensor_parallel: int) -> int:
        """KV heads one GPU holds: split by TP, replicated once TP exceeds them (`QKVParallelLinear`)."""
        return max(1, self.kv_heads // tensor_parallel) if self.kv_heads else 0

    def weight_bytes_per_gpu(self, tensor_parallel: int = 1, expert_parallel: int = 1,
                             moe_tensor_parallel: int | None = None) -> int:
        """Bytes of weights one GPU holds, as vLLM shards each operator class (see the module docstring).

        With expert parallelism the routed experts are split whole over `expert_parallel` GPUs (each holds
        ceil(experts / EP)); without it each expert is split over `moe_tensor_parallel` GPUs (TP x DP when
        data-parallel ranks share the MoE layers; TP by default). Norms are counted as split by TP (they are a few
        hundred kilobytes).
        """
        tp = max(tensor_parallel, 1)
        if not self.weight_groups:
            return self.weight_bytes() // tp
        split = whole = 0
        for group in self.weight_groups:
            if group.role in ("router", "attention_latent"):
                whole += group.bytes
            elif group.role == "experts" and expert_parallel > 1:
                whole += group.bytes * -(-self.experts // expert_parallel) // self.experts
            elif group.role == "experts" and moe_tensor_parallel is not None and moe_tensor_parallel != tp:
                whole += group.bytes // moe_tensor_parallel
            elif group.role == "attention" and self.kv_heads and not self.mla and tp > self.kv_heads:
                whole += self._attention_share(group.bytes, tp)
            else:
                split += group.bytes
        return split // tp + whole

    def _attention_share(self, group_bytes: int, tp: int) -> int:
        """One GPU's share of the Q/K/V/O weights when TP exceeds the KV heads: Q and O split by TP, one KV head's
        K and V on each GPU."""
        q_and_o = 2 * self.heads * self.head_dim
        k_and_v = 2 * self.kv_heads * self.head_dim
        return int(group_bytes * (q_and_o / tp + 2 * self.head_dim) / (q_and_o + k_and_v))
