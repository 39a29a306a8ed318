"""How long one engine step takes on a GPU, from the model's shapes and the GPU's peaks.

    step = overhead + per_request x requests + launch + max(memory time, compute time) + all-reduce

- memory time: weight bytes (per GPU; for MoE only the experts the batch touches) plus KV bytes
  read (every scheduled request's prior context) and written (its new tokens), over datasheet
  bandwidth x `bandwidth_efficiency`;
- compute time: 2 x active parameters x new tokens plus the attention FLOPs
  (4 x layers x heads x head_dim x query-key pairs, causal), over the datasheet peak of the weight
  dtype x `mfu` (FP8 peak for 8- and 4-bit weights, half the FP16 peak for FP32);
- launch: one host launch per kernel (about ten kernels per layer) in eager steps; a CUDA-graph
  replay (15 us + 0.5 us per kernel, `gpu-memory-and-streams.md` §5.4) for steps of at most 512
  tokens, which vLLM captures;
- all-reduce: two per layer under tensor parallelism, ring algorithm over NVLink (or PCIe),
  2 (TP-1)/TP x bytes over the per-direction bandwidth, plus 10 us latency each;
- overhead and per_request: the CPU time of scheduling, input preparation and sampling.

The four efficiency constants come from `calibration.py`, fitted on measured vLLM runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..scenario.presets import DTYPE_BYTES, PCIE_PER_DIRECTION, GpuProfile, ModelFamily

KERNELS_PER_LAYER = 10
GRAPH_LAUNCH_NS = 15_000
GRAPH_NODE_NS = 500
GRAPH_MAX_TOKENS = 512
ALLREDUCE_LATENCY_NS = 10_000


@dataclass(frozen=True)
class Efficiency:
    """The fitted constants of the cost model for one GPU type."""

    bandwidth: float
    """Achieved share of datasheet memory bandwidth."""
    mfu: float
    """Achieved share of datasheet tensor FLOP/s."""
    step_overhead_ns: int
    """CPU time per step."""
    per_request_ns: int
    """CPU time per scheduled request per step."""


class CostModel:
    """Step times of one model replica (TP shards) on one GPU type."""

    def __init__(self, arch: ModelFamily, gpu: GpuProfile, efficiency: Efficiency, tensor_parallel: int = 1,
                 kv_bytes_per_token: int = 0, cuda_graphs: bool = True, factor: float = 1.0) -> None:
        tp = tensor_parallel
        self.factor = factor
        self.efficiency = efficiency
        dtype_bytes = DTYPE_BYTES[arch.dtype]
        bandwidth = gpu.memory_bandwidth * efficiency.bandwidth
        peak = gpu.fp8_flops if arch.dtype in ("fp8", "int8", "int4") and gpu.fp8_flops else gpu.fp16_flops
        if arch.dtype == "fp32":
            peak //= 2  # TF32-rate tensor math, half the FP16 rate on Ampere and later (an approximation)
        flops = peak * efficiency.mfu
        active = arch.active_params or arch.params
        experts = arch.experts
        expert_params = (arch.params - active) / (experts - arch.experts_per_token) if experts > 1 else 0.0
        self._shared_weight_s = (arch.params - experts * expert_params) * dtype_bytes / tp / bandwidth
        self._expert_weight_s = expert_params * dtype_bytes / tp / bandwidth
        self._experts = experts
        self._route = arch.experts_per_token
        self._kv_s = kv_bytes_per_token / bandwidth
        per_token_flops = arch.flops_per_sample or 2 * active
        self._token_s = per_token_flops / tp / flops
        attention_width = arch.heads * arch.head_dim
        self._pair_s = 4 * arch.layers * attention_width / tp / flops
        kernels = max(arch.layers, 1) * KERNELS_PER_LAYER
        self._eager_launch_s = kernels * gpu.launch_latency_ns / 1e9
        self._graph_launch_s = (GRAPH_LAUNCH_NS + GRAPH_NODE_NS * kernels) / 1e9 if cuda_graphs else self._eager_launch_s
        self._fixed_s = efficiency.step_overhead_ns / 1e9
        self._request_s = efficiency.per_request_ns / 1e9
        if tp > 1:
            link = (gpu.interconnect_bandwidth / 2) if gpu.interconnect_bandwidth else PCIE_PER_DIRECTION[gpu.pcie_generation]
            self._allreduce_token_s = 2 * arch.layers * (2 * (tp - 1) / tp) * arch.hidden * dtype_bytes / link
            self._allreduce_fixed_s = 2 * arch.layers * ALLREDUCE_LATENCY_NS / 1e9
        else:
            self._allreduce_token_s = 0.0
            self._allreduce_fixed_s = 0.0

    def _weights_s(self, tokens: int) -> float:
        if self._experts == 1:
            return self._shared_weight_s
        touched = self._experts * (1 - (1 - self._route / self._experts) ** tokens)
        return self._shared_weight_s + touched * self._expert_weight_s

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

    def execution_parts(self, batch: int) -> tuple[int, int]:
        """(launch ns, GPU ns) of one Triton model execution over `batch` samples: the kernel launches
        and the forward pass, without an LLM engine's per-step scheduling and sampling."""
        launch = self._graph_launch_s if batch <= GRAPH_MAX_TOKENS else self._eager_launch_s
        _, gpu = self._parts_s(1, batch, 0, 0.0)
        return round(launch * self.factor * 1e9), round(gpu * self.factor * 1e9)

    def _parts_s(self, requests: int, new_tokens: int, context_tokens: int, pairs: float) -> tuple[float, float]:
        memory = self._weights_s(new_tokens) + (context_tokens + new_tokens) * self._kv_s
        compute = new_tokens * self._token_s + pairs * self._pair_s
        launch = self._graph_launch_s if new_tokens <= GRAPH_MAX_TOKENS else self._eager_launch_s
        host = self._fixed_s + requests * self._request_s + launch
        return host, max(memory, compute) + self._allreduce_fixed_s + new_tokens * self._allreduce_token_s

    def decode_series(self, requests: int, context_tokens: int, steps: int) -> np.ndarray:
        """Durations (ns) of `steps` consecutive decode-only steps of the same `requests` requests.

        Step k reads `context_tokens + k x requests` prior tokens; each request adds one token.
        Equal, element by element, to calling `step_ns` for each step.
        """
        k = np.arange(steps, dtype=np.float64)
        context = context_tokens + k * requests
        memory = self._weights_s(requests) + (context + requests) * self._kv_s
        compute = requests * self._token_s + (context + requests) * self._pair_s
        launch = self._graph_launch_s if requests <= GRAPH_MAX_TOKENS else self._eager_launch_s
        seconds = (self._fixed_s + requests * self._request_s + launch + np.maximum(memory, compute)
                   + self._allreduce_fixed_s + requests * self._allreduce_token_s)
        return np.rint(seconds * self.factor * 1e9).astype(np.int64)

    def activity(self, requests: int, new_tokens: int, context_tokens: int, pairs: float) -> tuple[float, float, float]:
        """What one step keeps busy, for telemetry: (the GPU's share of the step's time, tensor-pipe
        seconds at the datasheet peak, memory-interface seconds at the datasheet bandwidth). The last
        two measure the step's work (FLOPs, bytes), so `factor` does not change them."""
        host, gpu = self._parts_s(requests, new_tokens, context_tokens, pairs)
        memory = self._weights_s(new_tokens) + (context_tokens + new_tokens) * self._kv_s
        compute = new_tokens * self._token_s + pairs * self._pair_s
        return gpu / (host + gpu), compute * self.efficiency.mfu, memory * self.efficiency.bandwidth

    def decode_activity(self, requests: int, context_tokens: int, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`activity` for each step of a run of decode steps (the steps of `decode_series`)."""
        context = context_tokens + np.arange(steps, dtype=np.float64) * requests
        memory = self._weights_s(requests) + (context + requests) * self._kv_s
        compute = requests * self._token_s + (context + requests) * self._pair_s
        launch = self._graph_launch_s if requests <= GRAPH_MAX_TOKENS else self._eager_launch_s
        host = self._fixed_s + requests * self._request_s + launch
        gpu = np.maximum(memory, compute) + self._allreduce_fixed_s + requests * self._allreduce_token_s
        return gpu / (host + gpu), compute * self.efficiency.mfu, memory * self.efficiency.bandwidth
