"""How long one engine step takes: its kernels on one GPU of the replica, from vLLM's measured kernel tables,
plus the host's time between them.

    step = CPU + launch + GPU                  (a CUDA-graph replay: one launch, then the GPU)
    step = CPU + max(launches, GPU)            (eager: the host enqueues kernels while the GPU runs)
    CPU  = engine step + engine request x requests + engine token x tokens  (+ output x requests offline)
           (with async scheduling only what the GPU does not hide: max(CPU - GPU, 0))
           + critical: the step's time outside the tables' kernels that no scheduling hides
    GPU  = the step's kernels (`step_kernels.py`): per token count (GEMMs by weight format, norms, RoPE,
           activation, fused MoE, TP all-reduces, EP collectives), per request count (LM head, logits
           gather, sampling), and attention over the step's decode and prefill requests

- every GPU term is a lookup in AIConfigurator's tables of vLLM's kernels on this GPU (`kernels/`), or the
  nearest measured GPU's scaled by datasheet numbers; nothing about the GPU is fitted;
- decode attention: the `generation_attention` table at the batch's decode requests and their mean KV length
  (decode attention time is close to linear in the batch's total KV at a given batch, so the mean prices the
  blend), remembered per batch size as a curve over KV length;
- prefill attention: the `context_attention` table at the step's prefill requests, their mean new tokens and
  mean cached prefix;
- launches: a CUDA-graph replay (15 us + 0.5 us per kernel, `gpu-memory-and-streams.md` §5.4) for steps vLLM
  captured, of at most `graph_max_tokens` tokens (vLLM's `max_cudagraph_capture_size`,
  `min(2 x max_num_seqs, 512, max_num_batched_tokens)`, `vllm/config/vllm.py` `_set_cudagraph_sizes`); a larger
  step runs eagerly, one host launch per kernel, overlapped with the kernels before it;
- the CPU terms are the engine core's per-step work (scheduling, input preparation, sampling bookkeeping,
  output processing), fitted on end-to-end runs (`calibration.py`, `bench/calibrate.py`): with async scheduling the
  engine does all of it for step N+1 while step N's kernels run (vLLM's `step_with_batch_queue`: the sampled tokens
  stay on the GPU for the next step's inputs and come back on a side stream), so only what exceeds the kernels
  shows;
- `critical_ns` is the part of a step that sits on the GPU's critical path whatever the scheduling: the step's
  input copies, the input-id scatter, attention-metadata and sampler kernels beyond the tables' element-wise pass,
  and the gap before the next step's replay. It is fitted on the served runs (`bench/calibrate.py`
  `fit_critical`), where async scheduling hides the CPU terms, so their decode time per token over the tables'
  kernels fixes it.

`costModel.bandwidthEfficiency` and `mfu` still work: they scale the memory-bound terms (decode attention,
small-token kernels) and the compute-bound ones (prefill attention, large-token kernels) by the ratio of the
tables' achieved share of the datasheet (`Efficiency` defaults) to the given one.

The token- and request-dependent sums are computed for blocks of counts at once (numpy over the tables) and
remembered, so a step costs a few dict lookups.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...scenario.presets import DTYPE_BYTES, GpuProfile, ModelFamily
from .step_kernels import StepKernels

GRAPH_LAUNCH_NS = 15_000
GRAPH_NODE_NS = 500
GRAPH_MAX_TOKENS = 512
KERNELS_PER_LAYER = 12
"""Kernels a layer launches: two fused add-norms, QKV, RoPE (and cache write), attention, output projection, two
all-reduces, gate/up, activation, down, plus one for the MoE router or Q/K norms."""


def graph_capture_limit(max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """vLLM's default `max_cudagraph_capture_size`: `min(2 x max_num_seqs, 512)`, no more than the
    step's token budget (`vllm/config/vllm.py`, `_set_cudagraph_sizes`, vLLM 0.11 and later)."""
    return max(1, min(2 * max_num_seqs, GRAPH_MAX_TOKENS, max_num_batched_tokens))


BLOCK = 256
"""Token and request counts whose GPU sums are computed together (one numpy pass over the tables)."""
CACHE_LIMIT = 1 << 17
"""Token and request counts remembered per cost model."""
SERIES_BLOCK = 1024
"""KV lengths whose decode-step durations are priced together (one numpy pass, `_series_block`)."""
SERIES_BLOCKS = 1024
"""Blocks of decode-step durations remembered per kind of cost model (8 KB each; azure-conv uses about 500)."""
SHARED_MODELS = 16
"""Kinds of cost model (distinct constructor arguments) whose caches are kept for the next one built alike."""
KV_GRID = np.unique(np.round(np.geomspace(1, 1 << 21, 96)))
"""KV lengths at which a batch size's decode-attention curve is read from the tables (linear between them)."""
KV_LIST: list[float] = KV_GRID.tolist()


@dataclass(frozen=True)
class Efficiency:
    """The constants a scenario's `costModel` (and `aisim calibrate`) can set for one GPU type."""

    bandwidth: float
    """Achieved share of datasheet memory bandwidth (the tables' decode GEMM by default; scales memory-bound terms)."""
    mfu: float
    """Achieved share of datasheet tensor FLOP/s (the tables' large GEMM by default; scales compute-bound terms)."""
    step_overhead_ns: int
    """Engine-core CPU time per step."""
    per_request_ns: int
    """Engine-core CPU time per scheduled request per step."""
    per_token_ns: float = 0.0
    """Engine-core CPU time per scheduled token per step (input preparation)."""
    output_ns: int = 0
    """Offline entrypoint only: the `LLM` class's in-process output processing (detokenisation) per request per
    step; the server does it in its API-server process, overlapped with the engine's steps."""
    critical_ns: int = 0
    """Per step, on the critical path with or without async scheduling: the step's work outside the tables' kernels
    that the engine cannot prepare ahead (input copies and scatter, metadata and sampler kernels, the replay gap)."""


@dataclass(frozen=True)
class GpuConstants:
    """What the cost model knows about one GPU type, and where it comes from."""

    name: str
    default: Efficiency
    """The tables' achieved shares of the datasheet and the fitted host terms."""
    measured: bool
    """Whether the GPU's own kernel tables price it (False: another system's, scaled)."""
    uncertainty: float
    """Relative error band of its step times."""
    source: str = ""
    notes: dict[str, str] = field(default_factory=dict)


def _bucket(x: float) -> float:
    """`x` to about 1.5 % (the prefill-attention cache's key): exact below 64, then 64 steps per octave."""
    if x < 64:
        return float(round(x))
    step = 2.0 ** (math.floor(math.log2(x)) - 6)
    return round(x / step) * step


class _Caches:
    """What a cost model remembers: exact results of its pure functions of (its constructor's arguments, its GPU's
    constants), so that cost models built alike share them (`_shared`)."""

    __slots__ = ("decode_curves", "kernels", "prefill", "requests", "series", "tokens")

    def __init__(self) -> None:
        self.kernels: StepKernels | None = None
        self.tokens: dict[int, float] = {}
        self.requests: dict[int, float] = {}
        self.decode_curves: dict[int, tuple[np.ndarray, np.ndarray, list[float], list[float]]] = {}
        self.prefill: dict[tuple[int, float, float], float] = {}
        self.series: dict[tuple[int, int], np.ndarray] = {}


_SHARED: dict[tuple[Any, ...], _Caches] = {}


def _shared(arguments: dict[str, Any], constants: GpuConstants) -> _Caches:
    """The caches of the cost models built with these arguments and constants (the replicas of a deployment, the
    simulations of a plan's search): every price is a function of them alone, so one computed for one model is
    the same for the others. The `SHARED_MODELS` most recently built kinds are kept; arguments that cannot be
    hashed get caches of their own."""
    key = (tuple(arguments.items()), constants.name, constants.default)
    try:
        found = _SHARED.pop(key, None)
    except TypeError:
        return _Caches()
    if found is None:
        found = _Caches()
        while len(_SHARED) >= SHARED_MODELS:
            del _SHARED[next(iter(_SHARED))]
    _SHARED[key] = found  # most recently used last
    return found


class CostModel:
    """Step times of one model replica (TP shards) on one GPU type."""

    def __init__(self, arch: ModelFamily, gpu: GpuProfile, efficiency: Efficiency, tensor_parallel: int = 1,
                 kv_bytes_per_token: int = 0, cuda_graphs: bool = True, factor: float = 1.0,
                 constants: GpuConstants | None = None, graph_max_tokens: int = GRAPH_MAX_TOKENS,
                 expert_parallel: int = 1, data_parallel: int = 1, kv_dtype: str = "auto",
                 offline: bool = False, async_scheduling: bool = False) -> None:
        """`expert_parallel`, `data_parallel`: an MoE model's EP size and the DP ranks that share its MoE layers
        (each rank's step is priced as if every rank batched as many tokens as it does); `offline`: the `LLM`
        class's entrypoint (its in-process output processing, `Efficiency.output_ns`); `async_scheduling`: the engine
        core prepares the next step while the GPU runs this one (vLLM's `--async-scheduling`), so its CPU work costs
        only what the kernels do not hide."""
        arguments = dict(locals())
        del arguments["self"]
        if constants is None:
            from .calibration import constants as lookup
            constants = lookup(gpu)
        self.constants = constants
        self.tp, self.ep, self.dp = tensor_parallel, expert_parallel, data_parallel
        self.factor = factor
        self.efficiency = efficiency
        self.arch = arch
        self._memory = constants.default.bandwidth / efficiency.bandwidth
        self._compute = constants.default.mfu / efficiency.mfu
        self._token_model = arch.flops_per_sample is not None or arch.heads == 0
        shared = _shared(arguments, constants)
        self.kernels = shared.kernels if shared.kernels is not None else StepKernels(
            arch, gpu, tensor_parallel, expert_parallel, data_parallel, kv_dtype)
        shared.kernels = self.kernels
        self.layers = max(arch.layers, 1)
        self._kv_bytes = kv_bytes_per_token
        self._peak_flops = (gpu.fp8_flops if arch.low_precision_compute() and gpu.fp8_flops else gpu.fp16_flops) / (
            2 if arch.dtype == "fp32" else 1)
        self._peak_bandwidth = gpu.memory_bandwidth
        self._graphs = cuda_graphs
        self._graph_max = min(graph_max_tokens, GRAPH_MAX_TOKENS)
        kernels = self.layers * KERNELS_PER_LAYER
        self._eager_launch_s = kernels * gpu.launch_latency_ns / 1e9
        self._gaps_s = GRAPH_NODE_NS * kernels / 1e9
        """The GPU's idle gaps between back-to-back kernels, in a graph replay or a full eager queue alike."""
        self._graph_launch_s = GRAPH_LAUNCH_NS / 1e9 + self._gaps_s if cuda_graphs else self._eager_launch_s
        self._fixed_s = efficiency.step_overhead_ns / 1e9
        self._request_s = (efficiency.per_request_ns + (efficiency.output_ns if offline else 0)) / 1e9
        self._token_s = efficiency.per_token_ns / 1e9
        self._critical_s = efficiency.critical_ns / 1e9
        self._overlap = async_scheduling
        self._work()
        self._tokens_cache = shared.tokens
        self._requests_cache = shared.requests
        self._decode_curves = shared.decode_curves
        self._prefill_cache = shared.prefill
        self._series_blocks = shared.series
        """Decode-step durations (ns) per (batch size, block of `SERIES_BLOCK` KV lengths read): each element is
        what numpy's float operations give that step alone (`_series_block`)."""

    def _work(self) -> None:
        """The step's work for telemetry: weight bytes per GPU and FLOPs per token."""
        arch, tp = self.arch, self.tp
        if self._token_model:
            self._weights = arch.weight_bytes() / tp
            self._flops_per_token = (arch.flops_per_sample or 2 * arch.params) / tp
        else:
            # every weight a step reads: all but the embedding table (a step gathers only its tokens' rows)
            embedding = arch.role_bytes("embedding") if arch.weight_groups else arch.vocab * arch.hidden * DTYPE_BYTES[arch.dtype]
            self._weights = arch.weight_bytes_per_gpu(tp, self.ep) - embedding / tp
            self._flops_per_token = 2 * (arch.active_params or arch.params) / tp
        head_dim = arch.head_dim or (arch.hidden // arch.heads if arch.heads else 0)
        self._pair_flops = 2 * self.layers * arch.heads * (head_dim + arch.value_head_dim) / tp

    # -- cached sums -------------------------------------------------------------------------

    def _in_graph(self, tokens: int) -> bool:
        """Whether vLLM replays a step of `tokens` tokens from a captured CUDA graph."""
        return self._graphs and tokens <= self._graph_max

    def _blend(self, tokens: np.ndarray) -> np.ndarray:
        """The `costModel` override's scale of a token count's kernels: memory-bound at few tokens, compute-bound
        at many (1 with the default shares)."""
        if self._memory == 1.0 and self._compute == 1.0:
            return np.ones(np.shape(tokens))
        w = np.minimum(tokens / 512.0, 1.0)
        return self._memory ** (1 - w) * self._compute ** w

    def _tokens_s(self, tokens: int) -> float:
        """GPU seconds of the kernels sized by the step's token count (computed a block at a time)."""
        cached = self._tokens_cache.get(tokens)
        if cached is not None:
            return cached
        low = tokens // BLOCK * BLOCK
        t = np.arange(low, low + BLOCK, dtype=np.float64)
        if self._token_model:
            flops = self.efficiency.mfu * self._peak_flops
            bandwidth = self.efficiency.bandwidth * self._peak_bandwidth
            seconds = np.maximum(self._weights / bandwidth, t * self._flops_per_token / flops)
        else:
            graph = self._graphs & (t <= self._graph_max)
            seconds = self.kernels.tokens_s(np.maximum(t, 1), graph) * self._blend(t)
            seconds[t == 0] = 0.0
        if len(self._tokens_cache) < CACHE_LIMIT:
            self._tokens_cache.update(zip(range(low, low + BLOCK), seconds.tolist(), strict=True))
        return float(seconds[tokens - low])

    def _requests_s(self, requests: int) -> float:
        """GPU seconds of the LM head, the logits' gather and sampling for `requests` rows."""
        cached = self._requests_cache.get(requests)
        if cached is not None:
            return cached
        low = requests // BLOCK * BLOCK
        r = np.arange(low, low + BLOCK, dtype=np.float64)
        seconds = np.zeros(BLOCK) if self._token_model else self.kernels.requests_s(r) * self._memory
        if len(self._requests_cache) < CACHE_LIMIT:
            self._requests_cache.update(zip(range(low, low + BLOCK), seconds.tolist(), strict=True))
        return float(seconds[requests - low])

    def _decode_curve(self, batch: int) -> tuple[np.ndarray, np.ndarray, list[float], list[float]]:
        """A batch size's decode attention over `KV_GRID` (arrays for numpy, lists for one step in Python floats)."""
        found = self._decode_curves.get(batch)
        if found is None:
            ys = self.kernels.decode_attention_s(batch, KV_GRID) * self._memory
            found = self._decode_curves[batch] = (KV_GRID, ys, KV_LIST, ys.tolist())
        return found

    def _decode_attention_s(self, decodes: int, kv_tokens: float | np.ndarray) -> float | np.ndarray:
        """Decode attention of `decodes` requests reading `kv_tokens` KV tokens in all (each its own new one)."""
        if decodes <= 0 or self._token_model:
            return 0.0
        xs, ys, xl, yl = self._decode_curve(decodes)
        if isinstance(kv_tokens, np.ndarray):
            return np.interp(kv_tokens / decodes, xs, ys)
        x = kv_tokens / decodes  # one step: `np.interp` in Python floats (a tenth of its cost on a scalar)
        i = bisect_right(xl, x)
        if i <= 0:
            return yl[0]
        if i >= len(xl):
            return yl[-1]
        x0, x1 = xl[i - 1], xl[i]
        return yl[i - 1] + (yl[i] - yl[i - 1]) * (x - x0) / (x1 - x0)

    def _prefill_attention_s(self, prefills: int, tokens: float, prefix: float) -> float:
        if prefills <= 0 or tokens <= 0 or self._token_model:
            return 0.0
        key = (prefills, _bucket(tokens / prefills), _bucket(prefix / prefills))
        found = self._prefill_cache.get(key)
        if found is None:
            found = self.kernels.prefill_attention_s(*key) * self._compute
            if len(self._prefill_cache) < CACHE_LIMIT:
                self._prefill_cache[key] = found
        return found

    def _attention_s(self, requests: int, new_tokens: int, context_tokens: float, decodes: int | None,
                     decode_context: float) -> float:
        """Attention of a step: its decode requests (one new token each) and its prefill ones. Without the split
        (a caller that does not count it), every request decodes when each has one token, else one prefills."""
        if decodes is None:
            decodes = requests if new_tokens == requests else max(requests - 1, 0)
            decode_context = context_tokens * decodes / requests if requests else 0.0
        prefills = requests - decodes
        seconds = float(self._decode_attention_s(decodes, decode_context + decodes))
        return seconds + self._prefill_attention_s(prefills, new_tokens - decodes, context_tokens - decode_context)

    def _host_s(self, requests: int, tokens: int, gpu: float | np.ndarray) -> float | np.ndarray:
        """The step's time outside its kernels: the engine's CPU work (with async scheduling what the kernels do not
        hide of it), the critical-path term, then the graph replay's launch, or in an eager step whatever of its
        launches the kernels do not hide."""
        cpu: float | np.ndarray = self._fixed_s + requests * self._request_s + tokens * self._token_s
        scalar = not isinstance(gpu, np.ndarray)
        if self._overlap:  # the next step's CPU work runs under this step's kernels
            cpu = max(cpu - gpu, 0.0) if scalar else np.maximum(cpu - gpu, 0.0)
        cpu = cpu + self._critical_s
        if self._in_graph(tokens):
            return cpu + self._graph_launch_s
        if scalar:
            return cpu + max(self._eager_launch_s - gpu, self._gaps_s)
        return cpu + np.maximum(self._eager_launch_s - gpu, self._gaps_s)

    # -- steps -------------------------------------------------------------------------------

    def _parts_s(self, requests: int, new_tokens: int, context_tokens: float, pairs: float,
                 decodes: int | None = None, decode_context: float = 0) -> tuple[float, float]:
        gpu = (self._tokens_s(new_tokens) + self._requests_s(requests)
               + self._attention_s(requests, new_tokens, context_tokens, decodes, decode_context))
        return float(self._host_s(requests, new_tokens, gpu)), gpu

    def step_ns(self, requests: int, new_tokens: int, context_tokens: int, pairs: float,
                decodes: int | None = None, decode_context: int = 0) -> int:
        """Duration of a step scheduling `requests` requests with `new_tokens` tokens in all.

        `context_tokens`: prior tokens whose KV the step reads; `pairs`: causal query-key pairs; `decodes`: the
        requests with one new token, `decode_context` their prior tokens (None: inferred, `_attention_s`).
        """
        host, gpu = self._parts_s(requests, new_tokens, context_tokens, pairs, decodes, decode_context)
        return round((host + gpu) * self.factor * 1e9)

    def step_parts(self, requests: int, new_tokens: int, context_tokens: int, pairs: float,
                   decodes: int | None = None, decode_context: int = 0) -> tuple[int, int]:
        """The step's (host ns, GPU ns): scheduling, input preparation, launches and sampling on the
        CPU, then the kernels and all-reduces on the GPU. They add up to `step_ns`."""
        host, gpu = self._parts_s(requests, new_tokens, context_tokens, pairs, decodes, decode_context)
        total = round((host + gpu) * self.factor * 1e9)
        gpu_ns = min(total, round(gpu * self.factor * 1e9))
        return total - gpu_ns, gpu_ns

    def head_share(self, requests: int, new_tokens: int, context_tokens: int, pairs: float,
                   decodes: int | None = None, decode_context: int = 0) -> float:
        """The share of the step's GPU time in the LM head and sampling (the `logits` kernel of a
        layer-detail step graph); the rest is the layers'."""
        _, gpu = self._parts_s(requests, new_tokens, context_tokens, pairs, decodes, decode_context)
        return self._requests_s(requests) / gpu if gpu > 0 else 0.0

    def execution_parts(self, batch: int) -> tuple[int, int]:
        """(launch ns, GPU ns) of one Triton model execution over `batch` samples: the kernel launches
        and the forward pass, without an LLM engine's per-step scheduling and sampling."""
        gpu = self._tokens_s(batch) + self._requests_s(1) + self._prefill_attention_s(1, batch, 0)
        launch = self._graph_launch_s if self._in_graph(batch) else max(self._eager_launch_s - gpu, self._gaps_s)
        return round(launch * self.factor * 1e9), round(gpu * self.factor * 1e9)

    def decode_series(self, requests: int, context_tokens: int, steps: int) -> list[int]:
        """Durations (ns) of `steps` consecutive decode-only steps of the same `requests` requests.

        Step k reads `context_tokens + (k + 1) x requests` tokens of KV; each request adds one token. Nothing else of
        a decode step varies, so the durations come from a table of every KV length per batch size, priced
        `SERIES_BLOCK` lengths at a time in numpy (`_series_block`): a series is a strided slice of a block or two.
        Equal, to the nanosecond, to calling `step_ns` for each step (its Python floats interpolate the attention
        curve in another order, which moves the last bit of a few prices, never a nanosecond: tests check it).
        """
        out: list[int] = []
        read, stop = context_tokens + requests, context_tokens + requests * (steps + 1)
        while read < stop:
            index = read // SERIES_BLOCK
            low = index * SERIES_BLOCK
            block = self._series_blocks.get((requests, index))
            if block is None:
                block = self._series_block(requests, index)
            high = min(stop, low + SERIES_BLOCK)
            out += block[read - low:high - low:requests].tolist()
            read += -(-(high - read) // requests) * requests
        return out

    def _series_block(self, requests: int, index: int) -> np.ndarray:
        """Step durations (ns) of decode steps of `requests` requests reading each KV length of block `index`, in
        numpy. Every operation is element by element, so each is what a series of that one step gives."""
        low = index * SERIES_BLOCK
        host, gpu = self._decode_parts_at(requests, np.arange(low, low + SERIES_BLOCK, dtype=np.float64))
        total = np.broadcast_to(np.asarray(gpu + host, dtype=np.float64), (SERIES_BLOCK,)).copy()
        total *= self.factor
        total *= 1e9
        block = np.rint(total, out=total).astype(np.int64)
        if len(self._series_blocks) >= SERIES_BLOCKS:  # a server runs for ever: start again
            self._series_blocks.clear()
        self._series_blocks[requests, index] = block
        return block

    def _decode_parts(self, requests: int, context_tokens: int, steps: int) -> tuple[float | np.ndarray, np.ndarray]:
        read = np.arange(context_tokens + requests, context_tokens + requests * (steps + 1), requests, dtype=np.float64)
        return self._decode_parts_at(requests, read)

    def _decode_parts_at(self, requests: int, read: np.ndarray) -> tuple[float | np.ndarray, np.ndarray]:
        """(host s, GPU s) of decode steps of `requests` requests reading `read` KV tokens each."""
        gpu = np.asarray(self._decode_attention_s(requests, read), dtype=np.float64)
        gpu = gpu + (self._tokens_s(requests) + self._requests_s(requests))
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
