"""The work of each tabulated kernel (FLOPs, HBM bytes, link bytes) and its speed of light on a GPU.

The tables measure time; the roofline says how time should grow with a shape the table did not measure
and how it moves to another GPU. `SOL = max(FLOPs / tensor FLOP/s of the dtype, HBM bytes / memory
bandwidth, link bytes / link bandwidth)`, with the GPU's datasheet numbers (`Spec`). Only ratios of SOL are
ever used (a cell's SOL against its neighbour's, a query's against the table edge's, one GPU's against
another's), so a term common to both sides cancels; what matters is that each term scales with the shape
the way the kernel's work does.

Shapes are per GPU, as the collectors ran them: GEMM `m x k` activations by a `k x n` weight shard;
attention heads and KV heads after tensor parallelism; MoE `tokens` are all tokens entering the layer of an
expert-parallel group (each GPU computes `1 / moe_ep` of the routed work on `inter / moe_tp` columns).
MLA modules are DeepSeek-V3's attention blocks (the only MLA model measured), projections included: the
query and KV down-projections from the 7,168-wide hidden state, the per-head up-projections, attention, the
output projection; 128-dim no-RoPE and 64-dim RoPE query-key heads, 128-dim values, a 512-dim latent KV.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

FLOP_CLASS = {"bfloat16": "bf16", "float16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4",
              "int4_wo": "bf16", "w4a16_mxfp4": "bf16", "w4a8_mxfp4_mxfp8": "fp8"}
"""The tensor-core precision a dtype's kernels multiply in (weight-only INT4 and MXFP4 dequantise to BF16)."""
WEIGHT_BYTES = {"bfloat16": 2.0, "float16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "nvfp4": 0.5625, "int4_wo": 0.5,
                "w4a16_mxfp4": 0.53125, "w4a8_mxfp4_mxfp8": 0.53125}
"""Bytes per weight, block scales included (NVFP4: one FP8 scale per 16 values; MXFP4: one per 32)."""
ACTIVATION_BYTES = {"bfloat16": 2.0, "float16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "nvfp4": 0.5625, "int4_wo": 2.0,
                    "w4a16_mxfp4": 2.0, "w4a8_mxfp4_mxfp8": 1.0}
KV_BYTES = {"bfloat16": 2.0, "float16": 2.0, "fp8": 1.0}
ALLREDUCE_BYTES = 2.0
"""Bytes of one element of the `allreduce` table's messages: the rows kept are BF16 (`allreduce_dtype`), and
AIConfigurator's collector logs `message_size` as the tensor's element count (`collect_all_reduce.py` builds a
`[size // 4096, 4096]` tensor of that dtype; its database's `query_allreduce` says "count, not size in bytes")."""
UNLIMITED_WINDOW = 1 << 30
Number = float | np.ndarray
"""A size or a time: one number, or an array of them."""

# DeepSeek-V3's multi-head latent attention (config.json: hidden_size, q_lora_rank, kv_lora_rank,
# qk_nope_head_dim, qk_rope_head_dim, v_head_dim)
MLA_HIDDEN, MLA_Q_RANK, MLA_LATENT, MLA_NOPE, MLA_ROPE, MLA_V = 7168, 1536, 512, 128, 64, 128
MLA_SHARED = MLA_HIDDEN * (MLA_Q_RANK + MLA_LATENT + MLA_ROPE)
"""Weights per token shared by all heads: the query and KV down-projections."""
MLA_PER_HEAD = MLA_Q_RANK * (MLA_NOPE + MLA_ROPE) + MLA_V * MLA_HIDDEN
"""Weights per head of both phases: the query up-projection and the output projection."""


@dataclass(frozen=True)
class Spec:
    """Datasheet numbers of one GPU: what its speed of light is made of."""

    name: str
    bandwidth: float
    """Memory bytes/s."""
    flops: Mapping[str, float]
    """Dense tensor FLOP/s by precision (`bf16`, `fp8`, `fp4`); a precision the GPU lacks is absent."""
    link: float
    """Bytes/s one GPU sends to its peers in one direction (NVLink, or PCIe without it)."""
    gpus_per_node: int = 8
    scale_out: float = 0.0
    """Bytes/s per GPU between nodes (0: unknown)."""

    def supports(self, dtype: str) -> bool:
        return FLOP_CLASS.get(dtype, "bf16") in self.flops

    def seconds(self, work: Work) -> np.ndarray:
        compute = sum(flops / (self.flops.get(precision) or self.flops["bf16"])
                      for precision, flops in work.flops.items())
        return np.maximum(np.maximum(compute, work.hbm / self.bandwidth), work.link / self.link)


@dataclass(frozen=True)
class Work:
    """What one kernel does: FLOPs by tensor-core precision, bytes through memory and over links."""

    flops: Mapping[str, np.ndarray | float]
    hbm: np.ndarray | float
    link: np.ndarray | float = 0.0


def sizes_of(sizes: Sequence[Number]) -> list[Number]:
    """Sizes as Python floats when every one is a number (a single query stays in fast scalar code), else
    as float arrays broadcast together."""
    if all(isinstance(s, int | float) for s in sizes):
        return [float(s) for s in sizes]
    return list(np.broadcast_arrays(*[np.asarray(s, dtype=np.float64) for s in sizes]))


def scale(seconds: Number, floor: float, ratio: Number) -> Number:
    """A measured kernel moved to another amount of work or another GPU, `ratio` being the ratio of speeds
    of light: its fixed cost `floor` kept, the rest scaled. The one rule behind every estimate beyond the
    measurements: a larger size (`grid.py`), an unmeasured key (`tables.Table.seconds`), a 4-bit GEMM,
    a GPU without tables (`tables.ScaledTables`)."""
    fixed = np.minimum(floor, seconds)
    return fixed + (seconds - fixed) * ratio


def _causal_pairs(length: np.ndarray, window: float) -> np.ndarray:
    """Query-key pairs of causal attention over `length` tokens, each seeing at most `window` keys."""
    w = np.minimum(length, window)
    return w * (w + 1) / 2 + (length - w) * w


def causal_pairs(new: np.ndarray | float, prefix: np.ndarray | float, window: float) -> np.ndarray:
    """Pairs of `new` query tokens after `prefix` cached ones: those of the whole less those of the prefix."""
    w = float(window) if window else UNLIMITED_WINDOW
    return _causal_pairs(np.asarray(new) + np.asarray(prefix), w) - _causal_pairs(np.asarray(prefix, dtype=float), w)


def work(table: str, keys: Mapping[str, Any], sizes: Sequence[Number]) -> Work:
    """The work of one kernel of `table` with slice `keys` at `sizes` (the table's axes, in order)."""
    return _WORK[table](keys, *sizes)


def _gemm(keys: Mapping[str, Any], m: np.ndarray, n: np.ndarray, k: np.ndarray) -> Work:
    dtype = keys["dtype"]
    hbm = m * k * ACTIVATION_BYTES[dtype] + n * k * WEIGHT_BYTES[dtype] + m * n * 2
    return Work({FLOP_CLASS[dtype]: 2 * m * n * k}, hbm)


def _kv(keys: Mapping[str, Any], heads: np.ndarray) -> np.ndarray:
    return heads if keys["kv_heads"] == 0 else np.full(np.shape(heads), float(keys["kv_heads"]))


def _context(keys: Mapping[str, Any], heads: np.ndarray, isl: np.ndarray, batch: np.ndarray) -> Work:
    d = float(keys["head_dim"])
    pairs = causal_pairs(isl, 0.0, keys["window"])
    hbm = batch * isl * d * (4 * heads + 2 * _kv(keys, heads) * KV_BYTES[keys["kv_dtype"]])
    return Work({"bf16": 4 * batch * heads * d * pairs}, hbm)


def _generation(keys: Mapping[str, Any], heads: np.ndarray, batch: np.ndarray, kv_len: np.ndarray) -> Work:
    d = float(keys["head_dim"])
    seen = np.minimum(kv_len, keys["window"] or UNLIMITED_WINDOW)
    hbm = batch * (2 * _kv(keys, heads) * seen * d * KV_BYTES[keys["kv_dtype"]] + 4 * heads * d)
    return Work({"bf16": 4 * batch * heads * d * seen}, hbm)


def _mla_projections(gemm_dtype: str, tokens: np.ndarray, heads: np.ndarray, per_head: float
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs, weight bytes) of an MLA block's projections over `tokens` tokens."""
    weights = MLA_SHARED + heads * per_head
    return 2 * tokens * weights, weights * WEIGHT_BYTES[gemm_dtype]


def _mla_context(keys: Mapping[str, Any], heads: np.ndarray, isl: np.ndarray, batch: np.ndarray) -> Work:
    tokens = batch * isl
    flops, weights = _mla_projections(keys["gemm_dtype"], tokens, heads,
                                      MLA_PER_HEAD + MLA_LATENT * (MLA_NOPE + MLA_V))  # the latent's up-projection
    attention = 2 * batch * heads * causal_pairs(isl, 0.0, 0) * (MLA_NOPE + MLA_ROPE + MLA_V)
    hbm = weights + tokens * (heads * (2 * (MLA_NOPE + MLA_ROPE) + 2 * MLA_V) * 2 + MLA_HIDDEN * 4
                              + (MLA_LATENT + MLA_ROPE) * KV_BYTES[keys["kv_dtype"]])
    return Work({FLOP_CLASS[keys["gemm_dtype"]]: flops, FLOP_CLASS[keys["dtype"]]: attention}, hbm)


def _mla_generation(keys: Mapping[str, Any], heads: np.ndarray, batch: np.ndarray, kv_len: np.ndarray) -> Work:
    flops, weights = _mla_projections(keys["gemm_dtype"], batch, heads,
                                      MLA_PER_HEAD)  # the latent's up-projection absorbed into the BMMs below
    absorbed = 2 * batch * heads * MLA_LATENT * (MLA_NOPE + MLA_V)
    attention = 2 * batch * heads * kv_len * (2 * MLA_LATENT + MLA_ROPE)
    hbm = weights + heads * MLA_LATENT * (MLA_NOPE + MLA_V) * 2 + batch * kv_len * (
        MLA_LATENT + MLA_ROPE) * KV_BYTES[keys["kv_dtype"]]
    return Work({FLOP_CLASS[keys["gemm_dtype"]]: flops, "bf16": absorbed + attention}, hbm)


def _mla_bmm(keys: Mapping[str, Any], heads: np.ndarray, tokens: np.ndarray) -> Work:
    hbm = heads * MLA_NOPE * MLA_LATENT * 2 + tokens * heads * (MLA_NOPE + MLA_LATENT) * 2
    return Work({"bf16": 2 * tokens * heads * MLA_NOPE * MLA_LATENT}, hbm)


def moe_work(dtype: str, tokens: np.ndarray, hidden: float, inter: float, topk: float, experts: float,
             moe_tp: float, moe_ep: float) -> Work:
    """Gated experts (gate, up, down): every routed token of this GPU's share through `inter / moe_tp`
    columns; the weights of every local expert that at least one token reaches, read once."""
    routed = tokens * topk
    width = inter / moe_tp
    touched = experts / moe_ep * (1 - (1 - 1 / experts) ** routed)
    hbm = touched * 3 * hidden * width * WEIGHT_BYTES[dtype] + routed / moe_ep * (
        2 * hidden + 3 * width) * ACTIVATION_BYTES[dtype]
    return Work({FLOP_CLASS[dtype]: 2 * 3 * routed / moe_ep * hidden * width}, hbm)


def _moe(keys: Mapping[str, Any], tokens: np.ndarray) -> Work:
    return moe_work(keys["dtype"], tokens, keys["hidden"], keys["inter"], keys["topk"], keys["experts"],
                    keys["moe_tp"], keys["moe_ep"])


def _allreduce(keys: Mapping[str, Any], elements: np.ndarray) -> Work:
    """The table's size is the message's element count (BF16, `ALLREDUCE_BYTES` each), as the collector logs it."""
    gpus = float(keys["gpus"])
    nbytes = ALLREDUCE_BYTES * elements
    return Work({}, 2 * nbytes, 2 * (gpus - 1) / gpus * nbytes)


def _quantize(keys: Mapping[str, Any], m: np.ndarray, k: np.ndarray) -> Work:
    out = 0.0 if keys["kernel"] == "compute_scale" else 1.0
    return Work({"bf16": m * k}, m * k * (2 + out))


_WORK: dict[str, Callable[..., Work]] = {"gemm": _gemm, "context_attention": _context, "generation_attention": _generation,
         "mla_context": _mla_context, "mla_generation": _mla_generation, "mla_bmm": _mla_bmm, "moe": _moe,
         "allreduce": _allreduce, "quantize": _quantize}
