"""How long one engine step takes: the sum of its operators on one GPU of the replica.

    step = CPU + launch + GPU                  (a CUDA-graph replay: one launch, then the GPU)
    step = CPU + max(launches, GPU)            (eager: the host enqueues kernels while the GPU runs)
    CPU  = step overhead + per-request overhead x requests
    GPU  = embedding + layers x (norm, QKV, rope, attention, output projection, all-reduce,
                                 norm, gate/up, activation, down, all-reduce, add)
           + LM head and sampling over the requests that sample

- the linear operators are GEMMs of the step's tokens by the layer's weight shards (TP splits the
  QKV and gate/up outputs and the output and down projections' inputs), timed by the GEMM curve
  fitted on the Vidur profiles (`operators.py`); MoE layers run the experts the batch touches;
- element-wise operators by their class's fitted curve, over the elements they touch per GPU;
- attention: a kernel floor per layer, the prefill FLOPs (4 x heads x head_dim x causal query-key
  pairs per layer, split by TP) at the published FlashAttention throughput, and the KV bytes read
  and written (every scheduled request's context plus its new tokens) at the decode-attention
  bandwidth fitted on the Argonne rows;
- all-reduce: two per layer plus the embedding's (`tokens x hidden x 2` bytes) under TP, by the
  kernel vLLM picks (`collectives.py`): its custom one-/two-shot kernel on fully NVLink-connected
  groups below 8 MiB (device latency plus NVLink bytes), NCCL from the measured tables otherwise,
  on the GPU without their host-dispatch part (in a graph there is none; in an eager step the host
  dispatch is a launch, overlapped with the kernels before it); the logits' gather runs after the
  graph (vLLM computes logits outside it), by NCCL as measured;
- LM head: a GEMM of one row per request that samples (vLLM computes logits only at each
  request's last scheduled position) by the vocabulary shard; sampling an element-wise pass over
  the logits;
- launches: a CUDA-graph replay (15 us + 0.5 us per kernel, `gpu-memory-and-streams.md` §5.4) for
  steps vLLM captured, of at most `graph_max_tokens` tokens: vLLM's `max_cudagraph_capture_size`,
  `min(2 x max_num_seqs, 512, max_num_batched_tokens)` (`vllm/config/vllm.py`,
  `_set_cudagraph_sizes`); a larger step runs eagerly: one host launch per kernel plus NCCL's host
  dispatch per all-reduce (the measured tables' host floor, `collectives.py`). Kernel launches are
  asynchronous, so an eager step costs the longer of its launches and its kernels, not their sum:
  a step whose kernels outlast its launches (any prefill chunk of a large model) hides them, a tiny
  eager step is launch-bound;
- the step and per-request overheads are the engine's CPU time (scheduling, input preparation,
  sampling bookkeeping), fitted on the Argonne rows.

Every term's time depends on the step's token count, request count, prior context and causal
pairs; the token- and request-dependent parts are cached per count, so a step costs a few dict
lookups and multiplications.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ...scenario.presets import DTYPE_BYTES, GpuProfile, ModelFamily
from .collectives import (
    TensorParallelAllReduce,
    achieved_bandwidth,
    custom_capable,
    pick,
)
from .derived import Topology
from .operators import GemmCurve, elementwise_s, gemm_s

KERNELS_PER_LAYER = 10
GRAPH_LAUNCH_NS = 15_000
GRAPH_NODE_NS = 500
GRAPH_MAX_TOKENS = 512


def graph_capture_limit(max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """vLLM's default `max_cudagraph_capture_size`: `min(2 x max_num_seqs, 512)`, no more than the
    step's token budget (`vllm/config/vllm.py`, `_set_cudagraph_sizes`, vLLM 0.11 and later)."""
    return max(1, min(2 * max_num_seqs, GRAPH_MAX_TOKENS, max_num_batched_tokens))


CACHE_LIMIT = 4096
"""Token and request counts whose operator sums are remembered per cost model."""
SHORT_SERIES = 32
"""Decode series in CUDA graphs up to this many steps are summed in Python floats, longer ones in numpy
(`decode_series`: where the two cost the same here; half of all runs of azure-conv are 8 steps or fewer)."""


@dataclass(frozen=True)
class Efficiency:
    """The four constants a scenario's `costModel` (and `aisim calibrate`) can set for one GPU type."""

    bandwidth: float
    """Achieved share of datasheet memory bandwidth (GEMM weight traffic; scales every memory-bound term)."""
    mfu: float
    """Achieved share of datasheet tensor FLOP/s (large GEMMs; scales every compute-bound term)."""
    step_overhead_ns: int
    """CPU time per step."""
    per_request_ns: int
    """CPU time per scheduled request per step."""
    gemm_padding: float | None = None
    """Token padding of the GEMM curve (`operators.GemmCurve.m0`); None keeps the fitted profiles' value
    (a `vllm serve` engine takes the online calibration's, `online.py`)."""
    kernel_floor: float | None = None
    """Seconds: the most any kernel's fixed part (the GEMM curve's `t0`, the element-wise floors, the
    attention floor) costs; None keeps the profiles' floors (a `vllm serve` engine takes the online
    calibration's, `online.py`)."""


@dataclass(frozen=True)
class GpuConstants:
    """Everything the cost model knows about one GPU type, and where it comes from."""

    name: str
    gemm: GemmCurve
    elementwise: dict[str, tuple[float, float]]
    """Operator class -> (floor s, s per element)."""
    attention_floor: float
    """Seconds per attention kernel (one per layer per step)."""
    attention_flops: float
    """Prefill attention FLOP/s."""
    attention_bandwidth: float
    """KV-cache read bandwidth of decode attention, bytes/s."""
    allreduce: dict[str, dict[str, list[list[float]]]]
    """Topology -> workers -> [[bytes, seconds], ...] (the base GPU's tables for a derived GPU)."""
    allreduce_latency: float
    """Device-side seconds of a small all-reduce (the profiles' smallest; the base GPU's for a derived GPU)."""
    link_scale: float
    """Size factor applied to the all-reduce tables (1 on a profiled GPU; base link / this link otherwise)."""
    topology: Topology
    default: Efficiency
    """The constants as `costModel` shares: GEMM bandwidth and throughput over the datasheet peaks, CPU overheads."""
    measured: bool
    """Whether the operator curves were fitted on this GPU's own profiles."""
    uncertainty: float
    """Relative error band of its step times (see `derived.py`)."""
    source: str = ""
    notes: dict[str, str] = field(default_factory=dict)


def _intermediate(arch: ModelFamily, head_dim: int) -> tuple[int, bool]:
    """(MLP intermediate size, gated) of a family; derived from the parameter count when the
    architecture does not give it (the rest of the layer's weights, as a gated MLP). A model read from a
    config is a gated (SwiGLU) MLP: every architecture aisim reads from configs is."""
    if arch.weight_groups and arch.intermediate:
        return arch.intermediate, True
    h = arch.hidden
    attention = h * (arch.heads + 2 * arch.kv_heads) * head_dim + arch.heads * head_dim * h
    per_layer = (arch.params - 2 * arch.vocab * h) / max(arch.layers, 1)
    if arch.intermediate:
        gated_total = attention + 3 * h * arch.intermediate
        plain_total = attention + 2 * h * arch.intermediate
        return arch.intermediate, abs(gated_total - per_layer) <= abs(plain_total - per_layer)
    return max(int((per_layer - attention) / (3 * h)), h), True


class CostModel:
    """Step times of one model replica (TP shards) on one GPU type."""

    def __init__(self, arch: ModelFamily, gpu: GpuProfile, efficiency: Efficiency, tensor_parallel: int = 1,
                 kv_bytes_per_token: int = 0, cuda_graphs: bool = True, factor: float = 1.0,
                 constants: GpuConstants | None = None, graph_max_tokens: int = GRAPH_MAX_TOKENS,
                 expert_parallel: int = 1, data_parallel: int = 1) -> None:
        """`expert_parallel`, `data_parallel`: an MoE model's EP size and the DP ranks that share its MoE layers
        (each rank's step is priced as if every rank batched as many tokens as it does)."""
        if constants is None:
            from ..calibration import constants as lookup
            constants = lookup(gpu)
        self.constants = constants
        tp = self.tp = tensor_parallel
        self.ep, self.dp = expert_parallel, data_parallel
        self.factor = factor
        self.efficiency = efficiency
        self.arch = arch
        memory = constants.default.bandwidth / efficiency.bandwidth
        compute = constants.default.mfu / efficiency.mfu
        weight_bytes = arch.linear_bytes_per_param()
        peak = gpu.fp8_flops if arch.low_precision_compute() and gpu.fp8_flops else gpu.fp16_flops
        dtype_speed = peak / gpu.fp16_flops / (2 if arch.dtype == "fp32" else 1)
        self._gemm = constants.gemm.scaled(memory * weight_bytes / 2, compute / dtype_speed)
        if efficiency.gemm_padding is not None:
            self._gemm = dataclasses.replace(self._gemm, m0=efficiency.gemm_padding)
        cap = efficiency.kernel_floor if efficiency.kernel_floor is not None else float("inf")
        self._gemm = dataclasses.replace(self._gemm, t0=min(self._gemm.t0, cap))
        self._memory_bandwidth = constants.gemm.bandwidth / memory
        self._elementwise = {k: (min(f, cap), per * memory) for k, (f, per) in constants.elementwise.items()}
        self._peak_flops = peak / (2 if arch.dtype == "fp32" else 1)
        self._peak_bandwidth = gpu.memory_bandwidth
        layers = self.layers = max(arch.layers, 1)
        self._kv_s = kv_bytes_per_token / (constants.attention_bandwidth / memory)
        self._kv_bytes = kv_bytes_per_token
        self._token_model = arch.flops_per_sample is not None or arch.heads == 0
        head_dim = arch.head_dim or (arch.hidden // arch.heads if arch.heads else 0)
        pair = 2 * layers * arch.heads * (head_dim + (arch.v_head_dim or head_dim))  # QK and PV per causal pair
        self._pair_s = pair / tp / (constants.attention_flops / compute)
        self._pair_flops = pair / tp
        self._attention_fixed_s = layers * min(constants.attention_floor, cap) if not self._token_model else 0.0
        self._allreduce: TensorParallelAllReduce | None = None
        if tp > 1:
            tables = constants.allreduce.get(constants.topology) or next(iter(constants.allreduce.values()))
            self._allreduce = TensorParallelAllReduce(
                pick(tables, tp).scaled(constants.link_scale), tp, custom_capable(constants.topology, tp),
                constants.allreduce_latency, achieved_bandwidth(constants.allreduce) / constants.link_scale,
                self._memory_bandwidth)
        self._graphs = cuda_graphs
        self._graph_max = min(graph_max_tokens, GRAPH_MAX_TOKENS)
        self._shapes(arch, head_dim)
        kernels = layers * KERNELS_PER_LAYER
        self._eager_launch_s = kernels * gpu.launch_latency_ns / 1e9
        self._gaps_s = GRAPH_NODE_NS * kernels / 1e9
        """The GPU's idle gaps between back-to-back kernels, in a graph replay or a full eager queue alike."""
        self._graph_launch_s = GRAPH_LAUNCH_NS / 1e9 + self._gaps_s if cuda_graphs else self._eager_launch_s
        self._fixed_s = efficiency.step_overhead_ns / 1e9
        self._request_s = efficiency.per_request_ns / 1e9
        self._tokens_cache: dict[int, float] = {}
        self._requests_cache: dict[int, float] = {}

    # -- shapes ------------------------------------------------------------------------------

    def _shapes(self, arch: ModelFamily, head_dim: int) -> None:
        """The GEMM shapes of a layer on one GPU. MLA's projections count as one Q/K/V GEMM of their weights per
        GPU (the latent down-projections replicated); MoE layers run their GPU's experts (all of them split by
        the MoE's TP, or E / EP whole ones), plus shared experts as a dense MLP; dense layers of an MoE model
        (DeepSeek's first three) run the dense MLP."""
        tp = self.tp
        h = arch.hidden
        self._hidden = h
        if self._token_model:
            self._weights = arch.params * DTYPE_BYTES[arch.dtype] / tp
            self._flops_per_token = (arch.flops_per_sample or 2 * arch.params) / tp
            return
        inter, gated = _intermediate(arch, head_dim)
        if arch.mla:
            latent = arch.role_params("attention_latent") / arch.layers
            projections = arch.role_params("attention") / arch.layers - arch.heads * arch.value_head_dim * h
            qkv = (projections / tp + latent) / h
        elif arch.kv_heads >= tp:
            qkv = (arch.heads + 2 * arch.kv_heads) * head_dim / tp
        else:  # each GPU holds one KV head (vLLM replicates them)
            qkv = (arch.heads / tp + 2) * head_dim
        self._qkv = (qkv, h)
        self._out = (h, arch.heads * (arch.v_head_dim or head_dim) / tp)
        up = (2 if gated else 1) * inter / tp
        moe_tp = 1 if self.ep > 1 else tp * self.dp
        expert = arch.expert_intermediate if arch.moe else inter
        expert_up = (2 if gated else 1) * expert / moe_tp
        self._experts = -(-arch.experts // self.ep)
        self._route = arch.experts_per_token * self.dp * self._experts / arch.experts if self.ep > 1 or self.dp > 1 \
            else arch.experts_per_token
        """Expert assignments per token of this rank that land on this GPU (with DP, every rank's tokens)."""
        self._expert_up, self._expert_down = (expert_up, h), (h, expert / moe_tp)
        self._expert_act = expert / moe_tp
        self._up, self._down = (up, h), (h, inter / tp)
        self._shared_up, self._shared_down = (2 * arch.shared_intermediate / tp, h), (h, arch.shared_intermediate / tp)
        self._moe_layers = arch.moe_layers if arch.moe else 0
        self._mixed = 0 < len(arch.dense_layers) < arch.layers or arch.shared_intermediate > 0
        """Whether layers differ (dense and MoE layers, or shared experts beside the routed ones)."""
        self._rope_width = (arch.heads + arch.kv_heads) * head_dim / tp
        self._act_width = inter / tp
        self._vocab = arch.vocab / tp if arch.task == "generate" else 0.0
        attention = h * (qkv + self._out[1])
        dense_mlp = h * (up + inter / tp)
        moe_mlp = self._experts * h * (expert_up + expert / moe_tp) + 3 * h * arch.shared_intermediate / tp
        dense_layers = arch.layers - self._moe_layers
        linear = arch.layers * attention + dense_layers * dense_mlp + self._moe_layers * moe_mlp
        self._weights = (linear + (arch.vocab * h / tp if arch.task == "generate" else 0)) * arch.linear_bytes_per_param()
        routed = arch.experts_per_token * h * (expert_up + expert / moe_tp) + 3 * h * arch.shared_intermediate / tp
        self._flops_per_token = 2 * (arch.layers * attention + dense_layers * dense_mlp + self._moe_layers * routed)

    def _gemm_s(self, m: float, shape: tuple[float, float]) -> float:
        return float(gemm_s(self._gemm, m, shape[0], shape[1]))

    def _ew(self, kind: str, elements: float) -> float:
        return float(elementwise_s(self._elementwise[kind], elements))

    def _reduce_s(self, nbytes: float, graph: bool) -> float:
        return self._allreduce(nbytes, graph) if self._allreduce is not None else 0.0

    def _gather_s(self, nbytes: float) -> float:
        """The logits' gather: NCCL, eager (after the graph), as measured."""
        return self._allreduce.nccl(nbytes) if self._allreduce is not None else 0.0

    def _in_graph(self, tokens: int) -> bool:
        """Whether vLLM replays a step of `tokens` tokens from a captured CUDA graph."""
        return self._graphs and tokens <= self._graph_max

    def _host_s(self, requests: int, tokens: int, gpu: float | np.ndarray) -> float | np.ndarray:
        """The step's time outside its kernels: the engine's CPU work, then the graph replay's launch,
        or in an eager step whatever of its launches the kernels do not hide."""
        cpu = self._fixed_s + requests * self._request_s
        if self._in_graph(tokens):
            return cpu + self._graph_launch_s
        return cpu + np.maximum(self._eager_launch_s_for(tokens) - gpu, self._gaps_s)

    def _eager_launch_s_for(self, tokens: int) -> float:
        """Host seconds to launch an eager step: every kernel, plus NCCL's dispatch of each all-reduce
        that goes to NCCL (the custom kernel is an ordinary launch)."""
        reduce = self._allreduce
        if reduce is None or reduce.uses_custom(tokens * self._hidden * 2):
            return self._eager_launch_s
        return self._eager_launch_s + (2 * self.layers + 1) * reduce.host_floor

    def _tokens_s(self, tokens: int) -> float:
        """GPU seconds of the parts that depend on the step's token count only (cached)."""
        cached = self._tokens_cache.get(tokens)
        if cached is not None:
            return cached
        if self._token_model:
            seconds = max(self._weights / self._memory_bandwidth,
                          tokens * self._flops_per_token / self._gemm.flops) + self.layers * self._gemm.t0
        else:
            seconds = self._layers_s(tokens) + self._ew("emb", tokens * self._hidden)
            seconds += self._reduce_s(tokens * self._hidden * 2, self._in_graph(tokens))
        if len(self._tokens_cache) < CACHE_LIMIT:
            self._tokens_cache[tokens] = seconds
        return seconds

    def _layers_s(self, t: int) -> float:
        h = self._hidden
        attention = (2 * self._ew("norm", t * h) + self._gemm_s(t, self._qkv) + self._ew("rope", t * self._rope_width)
                     + self._gemm_s(t, self._out))
        tail = self._ew("add", t * h) + 2 * self._reduce_s(t * h * 2, self._in_graph(t))
        if not self._mixed:  # every layer alike: summed in the order the dense model always was
            mlp, act = self._moe_s(t) if self._moe_layers else self._dense_s(t)
            return self.layers * (attention + mlp + act + tail)
        moe = sum(self._moe_s(t)) + self._gemm_s(t, self._shared_up) + self._gemm_s(t, self._shared_down)
        dense = sum(self._dense_s(t))
        return self.layers * (attention + tail) + self._moe_layers * moe + (self.layers - self._moe_layers) * dense

    def _dense_s(self, t: int) -> tuple[float, float]:
        """(GEMMs, activation) of a dense MLP over `t` tokens."""
        return self._gemm_s(t, self._up) + self._gemm_s(t, self._down), self._ew("act", t * self._act_width)

    def _moe_s(self, t: int) -> tuple[float, float]:
        """(GEMMs, activation) of this GPU's routed experts over `t` tokens: each touched expert runs its share of
        the token assignments that land on this GPU."""
        if not t:
            return 0.0, 0.0
        assigned = t * self._route
        touched = self._experts * (1 - (1 - self._route / self._experts) ** t) if self._experts > 1 else 1.0
        per_expert = assigned / touched
        mlp = touched * (self._gemm_s(per_expert, self._expert_up) + self._gemm_s(per_expert, self._expert_down))
        return mlp, self._ew("act", assigned * self._expert_act)

    def _requests_s(self, requests: int) -> float:
        """GPU seconds of the LM head, the logits' gather and sampling for `requests` rows (cached)."""
        cached = self._requests_cache.get(requests)
        if cached is not None:
            return cached
        seconds = 0.0
        if not self._token_model and self._vocab and requests:
            seconds = (self._gemm_s(requests, (self._vocab, self._hidden)) + self._ew("act", requests * self._vocab * self.tp)
                       + self._gather_s(requests * self._vocab * 2))
        if len(self._requests_cache) < CACHE_LIMIT:
            self._requests_cache[requests] = seconds
        return seconds

    # -- steps -------------------------------------------------------------------------------

    def _parts_s(self, requests: int, new_tokens: int, context_tokens: float, pairs: float) -> tuple[float, float]:
        gpu = (self._tokens_s(new_tokens) + self._requests_s(requests) + self._attention_fixed_s
               + pairs * self._pair_s + (context_tokens + new_tokens) * self._kv_s)
        return float(self._host_s(requests, new_tokens, gpu)), gpu

    def step_ns(self, requests: int, new_tokens: int, context_tokens: int, pairs: float) -> int:
        """Duration of a step scheduling `requests` requests with `new_tokens` tokens in all.

        `context_tokens`: prior tokens whose KV the step reads; `pairs`: causal query-key pairs.
        """
        host, gpu = self._parts_s(requests, new_tokens, context_tokens, pairs)
        return round((host + gpu) * self.factor * 1e9)

    def step_parts(self, requests: int, new_tokens: int, context_tokens: int, pairs: float) -> tuple[int, int]:
        """The step's (host ns, GPU ns): scheduling, input preparation, launches and sampling on the
        CPU, then the kernels and all-reduces on the GPU. They add up to `step_ns`."""
        host, gpu = self._parts_s(requests, new_tokens, context_tokens, pairs)
        total = round((host + gpu) * self.factor * 1e9)
        gpu_ns = min(total, round(gpu * self.factor * 1e9))
        return total - gpu_ns, gpu_ns

    def head_share(self, requests: int, new_tokens: int, context_tokens: int, pairs: float) -> float:
        """The share of the step's GPU time in the LM head and sampling (the `logits` kernel of a
        layer-detail step graph); the rest is the layers'."""
        _, gpu = self._parts_s(requests, new_tokens, context_tokens, pairs)
        return self._requests_s(requests) / gpu if gpu > 0 else 0.0

    def execution_parts(self, batch: int) -> tuple[int, int]:
        """(launch ns, GPU ns) of one Triton model execution over `batch` samples: the kernel launches
        and the forward pass, without an LLM engine's per-step scheduling and sampling."""
        _, gpu = self._parts_s(1, batch, 0, 0.0)
        launch = self._graph_launch_s if self._in_graph(batch) else max(self._eager_launch_s_for(batch) - gpu, self._gaps_s)
        return round(launch * self.factor * 1e9), round(gpu * self.factor * 1e9)

    def decode_series(self, requests: int, context_tokens: int, steps: int) -> list[int]:
        """Durations (ns) of `steps` consecutive decode-only steps of the same `requests` requests.

        Step k reads `context_tokens + k x requests` prior tokens; each request adds one token.
        Equal, element by element, to calling `step_ns` for each step.
        """
        if steps > SHORT_SERIES or not self._in_graph(requests):
            host, gpu = self._decode_parts(requests, context_tokens, steps)
            total = gpu + host  # in place from here: each numpy temporary costs about a microsecond
            total *= self.factor
            total *= 1e9
            return np.rint(total, out=total).astype(np.int64).tolist()
        # a short run in a CUDA graph (most runs): the same float operations as `_decode_parts` in Python floats
        # (the same IEEE doubles; sums commute exactly, and `round` rounds half to even as `np.rint` does)
        fixed = self._tokens_s(requests) + self._requests_s(requests) + self._attention_fixed_s
        host = self._fixed_s + requests * self._request_s + self._graph_launch_s
        pair, kv, factor = self._pair_s, self._kv_s, self.factor
        read_tokens = context_tokens + requests  # each step's context + requests
        durations = []
        for _ in range(steps):
            durations.append(round((read_tokens * pair + fixed + read_tokens * kv + host) * factor * 1e9))
            read_tokens += requests
        return durations

    def _decode_parts(self, requests: int, context_tokens: int, steps: int) -> tuple[float | np.ndarray, np.ndarray]:
        # each step's context + requests, as exact integers (as float64 they are the same numbers)
        read = np.arange(context_tokens + requests, context_tokens + requests * (steps + 1), requests)
        gpu = read * self._pair_s
        gpu += self._tokens_s(requests) + self._requests_s(requests) + self._attention_fixed_s  # sums commute exactly
        gpu += read * self._kv_s
        return self._host_s(requests, requests, gpu), gpu

    # -- telemetry ---------------------------------------------------------------------------

    def _work_s(self, new_tokens: float, context: float | np.ndarray, pairs: float | np.ndarray
                ) -> tuple[float | np.ndarray, float | np.ndarray]:
        """(tensor-pipe seconds at the datasheet peak, memory seconds at the datasheet bandwidth)."""
        flops = new_tokens * self._flops_per_token + pairs * self._pair_flops
        dram = self._weights + (context + new_tokens) * self._kv_bytes
        return flops / self._peak_flops, dram / self._peak_bandwidth

    def activity(self, requests: int, new_tokens: int, context_tokens: int, pairs: float) -> tuple[float, float, float]:
        """What one step keeps busy, for telemetry: (the GPU's share of the step's time, tensor-pipe
        seconds at the datasheet peak, memory-interface seconds at the datasheet bandwidth). The last
        two measure the step's work (FLOPs, bytes), so `factor` does not change them."""
        host, gpu = self._parts_s(requests, new_tokens, context_tokens, pairs)
        tensor, dram = self._work_s(new_tokens, context_tokens, pairs)
        return gpu / (host + gpu), float(tensor), float(dram)

    def decode_activity(self, requests: int, context_tokens: int, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`activity` for each step of a run of decode steps (the steps of `decode_series`)."""
        host, gpu = self._decode_parts(requests, context_tokens, steps)
        context = context_tokens + np.arange(steps, dtype=np.float64) * requests
        tensor, dram = self._work_s(requests, context, context + requests)
        return gpu / (host + gpu), np.asarray(tensor), np.asarray(dram)
