"""The GPU work of one engine step, kernel by kernel, from vLLM's measured kernel tables (`kernels/`).

A step's kernels on one GPU of a replica, as vLLM runs them (one forward pass, every layer alike except
where the architecture says otherwise):

- per layer: fused add + RMSNorm, the QKV GEMM, Qwen3's per-head Q/K norms, RoPE, attention, the output
  projection, a TP all-reduce, fused add + RMSNorm, then the MLP: gate/up GEMM, SiLU-and-mul, down GEMM, and
  a TP all-reduce; an MoE layer's MLP is vLLM's fused MoE kernel (its table: tokens, experts, top-k, MoE TP
  and EP, at AIConfigurator's skewed routing `MOE_ROUTING`) plus its router GEMM and any shared experts (a
  dense MLP), and with data-parallel ranks sharing the experts an all-gather of every rank's tokens before and
  a reduce-scatter after (vLLM's `allgather_reducescatter` all-to-all backend);
- GEMMs from the `gemm` table in the weights' format (`TABLE_DTYPE`): bf16, fp8 per-tensor, fp8 block,
  NVFP4; INT4/MXFP4 weight-only as the BF16 GEMM with 4-bit weights (`KernelTables.gemm`);
- attention from the `context_attention` (prefill, with the prefix it attends to) and
  `generation_attention` (decode) tables in the KV cache's dtype, sliding-window layers with their window;
  MLA models from the `mla_context` / `mla_generation` modules: AIConfigurator's collector times vLLM's whole
  MLA attention forward there (the latent down-projections, the query and latent up-projections or their
  absorbed BMMs, RoPE, attention and the output projection), so an MLA layer prices no attention GEMM, RoPE or
  `mla_bmm` of its own (AIConfigurator's vLLM backend likewise uses the module in place of those ops); the decode
  module no slower than a sibling system's measurement of it (`mla_siblings`);
- all-reduce: vLLM's custom all-reduce, graph or eager as the step runs (`allreduce` table), NCCL beyond a
  node; one followed by the residual add and RMSNorm as FlashInfer's fused all-reduce up to vLLM's size limit
  (`FUSED_ALLREDUCE`); the logits' all-gather by NCCL;
- element-wise kernels (norms, RoPE, activation, embedding, sampling) have no table: each is the
  `quantize` table's `scale_matrix` kernel (a read-bf16/write-fp8 pass, the closest measured element-wise
  kernel) moved to the kernel's bytes: its fixed cost, then bytes at the bandwidth it reached at its largest
  measured size (`Elementwise`); a GPU without that table takes 2.5 us and 80 % of its datasheet bandwidth.

A GPU without tables is priced through `ScaledTables` (the nearest measured system scaled by datasheet
numbers); `kernels.systems.uncertainty` says how much wider its error is.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ...scenario.presets import GpuProfile, ModelFamily
from .kernels import SYSTEM_NAMES, KernelTables, MissingKernel, ScaledTables, for_gpu
from .kernels.tables import ARCHITECTURE

TABLE_DTYPE = {"bf16": "bfloat16", "fp16": "bfloat16", "fp32": "bfloat16", "fp8": "fp8", "fp8_block": "fp8_block",
               "nvfp4": "nvfp4", "int4_wo": "int4_wo", "mxfp4": "w4a16_mxfp4", "nvfp4_wo": "int4_wo",
               "fp8_wo": "bfloat16", "int8_wo": "bfloat16", "int8": "bfloat16", "int4": "int4_wo"}
"""A weight format -> the GEMM table that prices it. FP8 and INT8 weight-only (Marlin on Ampere) and W8A8 INT8
have no table: the BF16 GEMM stands in (their weights are half as many bytes, so a decode GEMM is priced up to
2x slow)."""
MOE_DTYPE = {"bfloat16": "bfloat16", "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4", "int4_wo": "int4_wo",
             "w4a16_mxfp4": "w4a16_mxfp4"}
FUSED_ALLREDUCE: dict[int, tuple[dict[int, float], dict[int, float]]] = {
    9: ({2: 64, 4: 2, 8: 0.5}, {2: 32, 4: 2, 8: 0.5}),
    10: ({2: 64, 4: 32, 8: 1}, {2: 32, 4: 4, 8: 1}),
}
"""Per compute-capability major: (the largest input in MiB, then the largest one-shot input in MiB) by TP size for
which vLLM replaces a TP all-reduce and the RMSNorm after it by FlashInfer's fused all-reduce
(`vllm/compilation/passes/fusion/allreduce_rms_fusion.py`, `FI_ALLREDUCE_FUSION_MAX_SIZE_MB` and
`_FI_ALLREDUCE_ONE_SHOT_MAX_SIZES_MB`, vLLM 0.16). The pass (`fuse_allreduce_rms`) is on by default at -O2 on
Hopper and Blackwell with TP > 1 since vLLM 0.16 (PR #34299; SM 10.3, B300/GB300, since PR #37755) and was off
with data parallelism from PR #34392 until PR #41458 (May 2026), after every served run here; the InferenceMAX
recipes of the gpt-oss-120b and Llama-3.1-70B rows turn it on explicitly. Ampere, Ada and SM 12.x keep the
table's all-reduce."""
MOE_ROUTING = "power_law_1.01"
"""The `moe` table's routing slice an MoE layer is priced at: AIConfigurator prices every MoE model's layers at
`power_law_1.01` (its models' `_power_law_alpha = 1.01`, "follow DeepSeek MoE"; `workload_distribution` default
`power_law`), not the `balanced` slice, in which each token's top-k experts are spread evenly over all experts.
Real routers are skewed: at decode's few tokens fewer experts are touched (fewer weights read), at prefill's many
the hot experts (and, with EP, their rank) take more tokens than an even share (the collector draws the routing
and times rank 0's share of it). A GPU whose table lacks the slice uses its other routings (`tables.STAND_INS`)."""
GEMM_CURVE_MAX = 16384
"""Token counts up to which each GEMM shape's curve is precomputed (`_GemmCurve`)."""
ELEMENTWISE_FLOOR_S = 2.5e-6
ELEMENTWISE_SHARE = 0.8
QK_NORM = ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "MiniMaxM2ForCausalLM")
"""Architectures with RMSNorms on Q and K (two more element-wise kernels per layer)."""
QK_NORM_TP = ("MiniMaxM2ForCausalLM",)
"""Architectures whose Q/K norm spans every head (`qk_norm_type: per_layer`): vLLM's `MiniMaxText01RMSNormTP`
all-reduces the per-token variances over the TP group (`tensor_model_parallel_all_reduce`), one more small
all-reduce per layer (q's and k's, 4 bytes a token each)."""

Array = Any
"""A size or an array of sizes (the tables broadcast numpy arrays)."""


@dataclass(frozen=True)
class Elementwise:
    """An element-wise kernel's time: `floor` seconds, then its bytes at `bandwidth` bytes/s."""

    floor: float
    bandwidth: float

    def __call__(self, nbytes: Array) -> Array:
        return self.floor + np.asarray(nbytes, dtype=np.float64) / self.bandwidth

    @classmethod
    def of(cls, tables: KernelTables, datasheet_bandwidth: float) -> Elementwise:
        """From the `quantize` table's `scale_matrix` pass (3 bytes an element: bf16 in, fp8 out)."""
        try:
            small = float(tables.quantize("scale_matrix", 1, 4096))
            m = 16384
            large = float(tables.quantize("scale_matrix", m, 8192))
        except (MissingKernel, KeyError):
            return cls(ELEMENTWISE_FLOOR_S, ELEMENTWISE_SHARE * datasheet_bandwidth)
        return cls(small, 3 * m * 8192 / max(large - small, 1e-9))


def mla_siblings(tables: KernelTables) -> list[KernelTables]:
    """The other measured systems of this GPU's architecture family (same compute-capability major) that measured
    the MLA decode module, scaled to this GPU (`ScaledTables`).

    The packaged MLA decode tables disagree 2x within Blackwell: vLLM 0.24's FlashInfer-MLA module on B200 takes
    44-50 us at 16 heads and 1-64 requests, the same source on B300, GB200 and GB300 (and 0.19's on B200 and B300)
    88-110 us, though B300 has B200's memory bandwidth and more tensor throughput; the served runs agree with the
    fast one (Kimi-K2.5 NVFP4 at TP 4, 1,024/1,024, 4-64 clients: TPOT on B300 0.96-1.0x B200's at the same
    concurrency). A kernel on this GPU is priced no slower than the same module measured on a sibling no stronger
    than it, moved to this GPU by the roofline (`StepKernels.decode_attention_s`)."""
    own = tables.base_system or tables.system
    family = ARCHITECTURE.get(own, 0) // 10
    if not family:
        return []
    found: list[KernelTables] = []
    for system in SYSTEM_NAMES:
        if system == own or ARCHITECTURE.get(system, 0) // 10 != family:
            continue
        base = KernelTables.for_system(system)
        if base.has("mla_generation"):
            found.append(ScaledTables(base, tables.spec, tables.system))
    return found


def _major(compute_capability: str) -> int:
    head = compute_capability.split(".")[0]
    return int(head) if head.isdigit() else 0


class _Gemm:
    """The GEMMs of one weight format on one GPU, as a curve over token counts per (n, k) shape.

    A GEMM of m tokens is priced at the fastest of: its format's table; the BF16 table of the same shape; and any
    larger m's time (a GEMM of m tokens can always run padded to a larger tile; this also removes the measurement
    noise of the small-m rows, which only ever adds time). The format's table is what vLLM runs for that format
    (AIConfigurator's collector calls vLLM's own linear methods); BF16's stands in where it is faster because the
    packaged tables are vLLM 0.24's, and some of its quantized kernels are slower than the BF16 GEMM where the
    served runs' older vLLM did not use them (0.24's DeepGEMM block-FP8 path takes 170-270 us for any m up to
    1,024; 0.19's block-FP8 table, 11-25 us at small m). A quantized GEMM is not priced faster than its own
    table or BF16's: the BF16 kernel's efficiency carried to the format's tensor cores and bytes (what this
    priced before) made every FP8 decode GEMM 1.4-1.9x faster than any measured kernel on B200 and H100 alike
    (`bench/kernel_fidelity.py`), and the closed-loop TPOT 10-20 % too fast. The format's table is BF16's where
    the GPU has none."""

    def __init__(self, tables: KernelTables, dtype: str) -> None:
        self.tables = tables
        try:
            tables.gemm(dtype, 1, 1024, 1024)
        except MissingKernel:
            dtype = "bfloat16"
        self.dtype = dtype
        self._curves: dict[tuple[float, float], np.ndarray] = {}

    def _direct(self, m: Array, n: float, k: float) -> Array:
        own = np.asarray(self.tables.gemm(self.dtype, m, n, k), dtype=np.float64)
        if self.dtype == "bfloat16":
            return own
        return np.minimum(own, np.asarray(self.tables.gemm("bfloat16", m, n, k), dtype=np.float64))

    def curve(self, n: float, k: float) -> np.ndarray:
        found = self._curves.get((n, k))
        if found is None:
            m = np.arange(1, GEMM_CURVE_MAX + 1, dtype=np.float64)
            found = self._curves[(n, k)] = np.minimum.accumulate(self._direct(m, n, k)[::-1])[::-1]
        return found

    def __call__(self, m: Array, n: float, k: float) -> Array:
        m = np.asarray(m, dtype=np.float64)
        index = np.clip(np.rint(m).astype(np.int64), 1, GEMM_CURVE_MAX) - 1
        seconds = self.curve(n, k)[index]
        beyond = m > GEMM_CURVE_MAX
        if np.any(beyond):
            seconds = np.where(beyond, self._direct(np.maximum(m, 1), n, k), seconds)
        return seconds


class StepKernels:
    """The GPU seconds of one step's kernels on one GPU, for a model, GPU and parallel layout."""

    def __init__(self, arch: ModelFamily, gpu: GpuProfile, tp: int = 1, ep: int = 1, dp: int = 1,
                 kv_dtype: str = "auto") -> None:
        self.tables = tables = for_gpu(gpu)
        self.arch, self.tp, self.ep, self.dp = arch, tp, ep, dp
        self.measured = tables.measured
        self.source = tables.source
        self.elementwise = Elementwise.of(tables, float(gpu.memory_bandwidth))
        self.act_bytes = 2.0
        h = self.hidden = arch.hidden
        self.layers = max(arch.layers, 1)
        head_dim = arch.head_dim or (h // arch.heads if arch.heads else 0)
        self.head_dim = head_dim
        self.heads = max(arch.heads // tp, 1) if arch.heads else 0
        self.kv_heads = arch.kv_heads_per_gpu(tp) if not arch.mla else self.heads
        self.kv_dtype = "bfloat16" if kv_dtype == "auto" else "fp8"
        formats = {role: TABLE_DTYPE.get(arch.format_of(role), "bfloat16")
                   for role in ("attention", "dense", "shared", "lm_head")}
        gemms = {dtype: _Gemm(tables, dtype) for dtype in set(formats.values())}
        self._gemm = {role: gemms[dtype] for role, dtype in formats.items()}
        self.moe_dtype = MOE_DTYPE.get(TABLE_DTYPE.get(arch.format_of("experts"), "bfloat16"), "bfloat16")
        if self.moe_dtype == "w4a16_mxfp4" and _major(gpu.compute_capability) >= 10 and tables.has(
                "moe", dtype="w4a8_mxfp4_mxfp8"):
            self.moe_dtype = "w4a8_mxfp4_mxfp8"  # vLLM's MXFP4 MoE on Blackwell: FlashInfer's MXFP4 x MXFP8 kernel
        self.family = _major(gpu.compute_capability)
        self.qk_norm = arch.architecture in QK_NORM
        self.qk_norm_tp = arch.architecture in QK_NORM_TP
        types = arch.attention_types
        window = arch.sliding_window or arch.attention_chunk
        sliding = sum(1 for t in types if t != "full_attention") if window else 0
        self.attention_layers = ((self.layers - sliding, 0), (sliding, window)) if sliding else ((self.layers, 0),)
        """(layers, window) of each kind of attention layer."""
        self._shapes()

    # -- shapes ------------------------------------------------------------------------------

    def _shapes(self) -> None:
        arch, tp, h = self.arch, self.tp, self.hidden
        d = self.head_dim
        if arch.mla:  # every projection is inside the MLA modules (`mla_context`, `mla_generation`)
            self.qkv = []
        elif arch.kv_heads >= tp:
            self.qkv = [((arch.heads + 2 * arch.kv_heads) * d / tp, h)]
        else:  # each GPU holds one KV head (vLLM replicates them)
            self.qkv = [((arch.heads / tp + 2) * d, h)]
        self.out = (h, arch.heads * arch.value_head_dim / tp)
        inter = arch.intermediate
        self.up, self.down = (2 * inter / tp, h), (h, inter / tp)
        self.moe_layers = arch.moe_layers if arch.moe else 0
        self.moe_tp = 1 if self.ep > 1 else tp * self.dp
        self.moe_ep = self.ep
        self.shared = (2 * arch.shared_intermediate / tp, h), (h, arch.shared_intermediate / tp)
        self.vocab = arch.vocab / tp if arch.task == "generate" else 0.0

    # -- per token count ---------------------------------------------------------------------

    def tokens_s(self, t: Array, graph: Array) -> Array:
        """GPU seconds of every kernel whose size is the step's token count `t` (an array), with its all-reduces
        in a CUDA graph where `graph` is true."""
        t = np.asarray(t, dtype=np.float64)
        h, ew = self.hidden, self.elementwise
        act = self.act_bytes
        gemm = self._gemm["attention"]
        norms = 2 * ew(t * h * 4 * act)
        if self.arch.mla:  # projections and RoPE are inside the MLA modules (`decode_attention_s`, `prefill_attention_s`)
            attention = np.zeros(np.shape(t))
        else:
            attention = gemm(t, *self.out)
            for n, k in self.qkv:
                attention = attention + gemm(t, n, k)
            norms = norms + ew(t * (self.heads + self.kv_heads) * self.head_dim * 2 * act)
        if self.qk_norm:
            norms = norms + ew(t * self.heads * self.head_dim * 2 * act) + ew(t * self.kv_heads * self.head_dim * 2 * act)
        reduce = 2 * self._allreduce(t * h * act, graph, fused=True)
        if self.qk_norm_tp:
            reduce = reduce + self._allreduce(t * 2 * 4.0, graph)
        dense_layers = self.layers - self.moe_layers
        dense = self._gemm["dense"](t, *self.up) + self._gemm["dense"](t, *self.down) + ew(t * self.up[0] * 1.5 * act)
        seconds = self.layers * (attention + norms + reduce) + dense_layers * dense
        if self.moe_layers:
            seconds = seconds + self.moe_layers * self._moe_s(t)
        # the embedding, and its all-reduce (followed by the first layer's RMSNorm)
        return seconds + ew(t * h * act) + self._allreduce(t * h * act, graph, fused=True)

    def _allreduce(self, nbytes: Array, graph: Array, fused: bool = False) -> Array:
        """vLLM's TP all-reduce of `nbytes` per GPU, as its `tensor_model_parallel_all_reduce` runs it at that size
        (the custom kernel, symmetric memory or NCCL: the table measured that call), in a CUDA graph or eager;
        `fused`: an all-reduce followed by the residual add and RMSNorm, which vLLM runs as FlashInfer's fused
        all-reduce up to its size limit (`_fused_allreduce`)."""
        if self.tp <= 1:
            return np.zeros(np.shape(nbytes))
        tables, n = self.tables, self.tp
        nbytes = np.asarray(nbytes, dtype=np.float64)
        seconds = np.where(graph, tables.allreduce(nbytes, n, True), tables.allreduce(nbytes, n, False))
        limits = FUSED_ALLREDUCE.get(self.family) if fused and self.dp == 1 else None
        if limits is None or n not in limits[0] or n > tables.spec.gpus_per_node:
            return seconds
        fused_s = np.minimum(self._fused_allreduce(nbytes, graph, limits[1][n]), seconds)
        return np.where(nbytes <= limits[0][n] * 2**20, fused_s, seconds)

    def _fused_allreduce(self, nbytes: Array, graph: Array, one_shot_mib: float) -> Array:
        """FlashInfer's fused all-reduce + residual add + RMSNorm (TensorRT-LLM's Lamport kernels), which no table
        measured: the all-reduce table's own fixed cost on this many GPUs (its smallest message, graph or eager),
        then the bytes each GPU sends at the bus bandwidth the table reached at its largest message
        (`KernelTables.allreduce_bus`): one-shot, every GPU pushes its whole buffer to each peer ((n - 1) x bytes),
        up to FlashInfer's one-shot limit; two-shot beyond it, a reduce-scatter and an all-gather (2 (n - 1) / n x
        bytes). vLLM turns the fusion on because it is faster than the all-reduce and norm it replaces (its
        fusion table: 5-20 % end to end), so it is never priced slower than the table's all-reduce."""
        n = self.tp
        (graph_floor, graph_bus), (eager_floor, eager_bus) = self._allreduce_buses
        sent = np.where(nbytes <= one_shot_mib * 2**20, (n - 1) * nbytes, 2 * (n - 1) / n * nbytes)
        return np.where(graph, graph_floor + sent / graph_bus, eager_floor + sent / eager_bus)

    def _moe_s(self, t: Array) -> Array:
        """One MoE layer's MLP: router, fused experts over every DP rank's tokens, shared experts, and the
        all-gather / reduce-scatter of the DP ranks' tokens."""
        arch, h = self.arch, self.hidden
        group = t * self.dp
        dtype = self.moe_dtype
        try:
            experts = self.tables.moe(dtype, group, h, arch.expert_intermediate, arch.experts_per_token, arch.experts,
                                      self.moe_tp, self.moe_ep, MOE_ROUTING)
        except MissingKernel:
            experts = self.tables.moe("bfloat16", group, h, arch.expert_intermediate, arch.experts_per_token,
                                      arch.experts, self.moe_tp, self.moe_ep, MOE_ROUTING)
        seconds = np.asarray(experts, dtype=np.float64) + self._gemm["dense"](t, arch.experts, h)
        if arch.shared_intermediate:
            up, down = self.shared
            seconds = seconds + self._gemm["shared"](t, *up) + self._gemm["shared"](t, *down)
        if self.dp > 1:
            ranks = self.dp * self.tp
            nbytes = group * h * self.act_bytes
            seconds = seconds + self.tables.nccl("all_gather", nbytes, ranks) + self.tables.nccl("reduce_scatter",
                                                                                                   nbytes, ranks)
        return seconds

    # -- per request count -------------------------------------------------------------------

    def requests_s(self, r: Array) -> Array:
        """The LM head over one row per request that samples, the logits' gather and sampling."""
        r = np.asarray(r, dtype=np.float64)
        if not self.vocab:
            return np.zeros(np.shape(r))
        seconds = self._gemm["lm_head"](np.maximum(r, 1), self.vocab, self.hidden)
        seconds = seconds + self.elementwise(r * self.vocab * self.tp * 4 * 2)
        if self.tp > 1:
            seconds = seconds + self.tables.nccl("all_gather", r * self.vocab * self.tp * self.act_bytes, self.tp)
        return np.where(r > 0, seconds, 0.0)

    # -- attention ---------------------------------------------------------------------------

    def decode_attention_s(self, batch: Array, kv_len: Array) -> Array:
        """Decode attention of `batch` requests of mean KV length `kv_len` over every layer."""
        batch = np.maximum(np.asarray(batch, dtype=np.float64), 1)
        kv_len = np.maximum(np.asarray(kv_len, dtype=np.float64), 1)
        arch, t = self.arch, self.tables
        if arch.mla:
            heads = self.heads
            gemm = TABLE_DTYPE.get(arch.format_of("attention"), "bfloat16")
            gemm = gemm if gemm in ("bfloat16", "fp8_block", "nvfp4") else "bfloat16"
            module = None
            for tables in (t, *self._mla_siblings):
                try:
                    one = np.asarray(tables.mla_generation(batch, kv_len, heads, self.kv_dtype, gemm))
                except MissingKernel:
                    try:
                        one = np.asarray(tables.mla_generation(batch, kv_len, heads, "bfloat16", "bfloat16"))
                    except MissingKernel:
                        continue
                module = one if module is None else np.minimum(module, one)
            if module is None:
                raise MissingKernel(f"{t.system} has no mla_generation table")
            return self.layers * module
        seconds = np.zeros(np.broadcast(batch, kv_len).shape)
        for layers, window in self.attention_layers:
            if layers:
                seconds = seconds + layers * np.asarray(self._generation(batch, kv_len, window))
        return seconds

    @cached_property
    def _allreduce_buses(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """(fixed cost, bus bandwidth) of this TP group's all-reduce in a CUDA graph, then eager."""
        return self.tables.allreduce_bus(self.tp, True), self.tables.allreduce_bus(self.tp, False)

    @cached_property
    def _mla_siblings(self) -> list[KernelTables]:
        return mla_siblings(self.tables)

    def _generation(self, batch: Array, kv_len: Array, window: int) -> Array:
        """Decode attention of one layer of `window` (0: full attention) over requests of `kv_len` tokens.

        A sliding-window layer reads its window's slice at the requests' own context length, as the collector
        measured it (`isl + step`): on Hopper the windowed kernel is not as cheap at a long context as at one as short
        as the window (figures: docs/cost-model.md). Only the full-attention stand-in (a GPU without the window's
        slice) is read at the tokens the window keeps."""
        try:
            return self.tables.generation_attention(batch, kv_len, self.heads, self.kv_heads, self.head_dim,
                                                    self.kv_dtype, window)
        except MissingKernel:
            span = np.minimum(kv_len, window) if window else kv_len
            return self.tables.generation_attention(batch, span, self.heads, self.kv_heads, self.head_dim,
                                                    "bfloat16", 0)

    def prefill_attention_s(self, batch: float, isl: float, prefix: float) -> float:
        """Prefill attention of `batch` sequences of `isl` new tokens after `prefix` cached ones, every layer."""
        if batch <= 0 or isl <= 0:
            return 0.0
        arch, t = self.arch, self.tables
        if arch.mla:
            gemm = TABLE_DTYPE.get(arch.format_of("attention"), "bfloat16")
            gemm = gemm if gemm in ("bfloat16", "fp8_block", "nvfp4") else "bfloat16"
            try:
                module = t.mla_context(batch, isl, self.heads, self.kv_dtype, "bfloat16", gemm, prefix=prefix)
            except MissingKernel:
                module = t.mla_context(batch, isl, self.heads, "bfloat16", "bfloat16", "bfloat16", prefix=prefix)
            return float(self.layers * module)
        seconds = 0.0
        for layers, window in self.attention_layers:
            if layers:
                try:
                    one = t.context_attention(batch, isl, self.heads, self.kv_heads, self.head_dim, self.kv_dtype,
                                              window, prefix)
                except MissingKernel:
                    one = t.context_attention(batch, isl, self.heads, self.kv_heads, self.head_dim, "bfloat16", 0,
                                              prefix)
                seconds += layers * float(one)
        return seconds
