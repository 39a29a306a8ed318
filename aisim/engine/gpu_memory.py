"""What the engine keeps in each GPU's memory pool, and what happens when the pool runs out.

Each GPU device has one pool (the scenario's allocator), shared by the replicas placed on it as if
they were one process. Loading a vLLM replica does in the pools of its tensor-parallel group what
vLLM's start-up does: check that the GPU's free memory covers the requested share, load the
weights (one tensor per layer), run the profile pass (its activation peak is allocated, freed and
handed back by `empty_cache`, as vLLM does), then allocate the KV cache (one tensor per layer, sized
by the memory plan), with non-PyTorch memory (cuBLAS, NCCL) outside the pool. Every step then
allocates its activation tensors (`memory.activation_tensors`) and frees them when it ends, so the
caching allocator holds on to segments for them. The headroom vLLM leaves (1 - utilisation) is what
those steps draw on: when another process takes it, a step whose tensors need a new segment fails
with PyTorch's out-of-memory message, and the engine dies as vLLM's does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..scenario.presets import GIB, ModelFamily
from .memory import MemoryPlan, activation_tensors
from .pool import Allocation, Allocator
from .timeline import Timeline


def record_levels(pool: Allocator, gpu: str, timeline: Timeline, now: int) -> None:
    """Put the pool's warning / critical threshold crossings on the timeline."""
    for event in pool.drain_events():
        timeline.add(now, "memory", gpu, event.level, event.usage, event.used)


def startup_problem(pools: list[tuple[str, Allocator]], plan: MemoryPlan, utilization: float) -> str:
    """vLLM's start-up check: the free memory of each GPU must cover the instance's requested share.

    vLLM empties PyTorch's cache and reads `cudaMemGetInfo`; an allocator that holds the device as
    one arena (buddy) counts its unallocated part as free.
    """
    for index, (_, pool) in enumerate(pools):
        pool.empty_cache()
        free = pool.device.free_bytes() + pool.memory_reserved() - pool.memory_allocated()
        if free < plan.requested:
            return (f"ValueError: Free memory on device cuda:{index} ({free / GIB:.2f}/{plan.capacity / GIB:.2f} GiB) on "
                    f"startup is less than desired GPU memory utilization ({utilization}, {plan.requested / GIB:.2f} GiB). "
                    "Decrease GPU memory utilization or reduce GPU memory used by other processes.")
    return ""


@dataclass
class ReplicaMemory:
    """One replica's tensors in the pools of its GPUs, and its per-step activations."""

    pools: list[tuple[str, Allocator]]
    arch: ModelFamily
    tensor_parallel: int
    held: list[tuple[Allocator, Allocation]] = field(default_factory=list)
    step: list[tuple[Allocator, Allocation]] = field(default_factory=list)
    non_torch: int = 0
    """Bytes the replica holds outside the pool on each GPU (CUDA context growth, cuBLAS, NCCL)."""

    def load(self, plan: MemoryPlan) -> None:
        """Weights, KV cache and the profile run's activation peak; raises `OutOfMemoryError`."""
        layers = max(self.arch.layers, 1)
        self.non_torch = plan.non_torch
        for _, pool in self.pools:
            pool.set_non_pytorch(pool.device.non_pytorch + plan.non_torch)
            for _ in range(layers):
                self.held.append((pool, pool.malloc(plan.weights // layers)))
            pool.free(pool.malloc(plan.activation_peak))
            pool.empty_cache()
            if plan.has_kv:
                per_layer = plan.num_blocks * plan.block_size * plan.kv_bytes_per_token // layers
                for _ in range(layers):
                    self.held.append((pool, pool.malloc(per_layer)))

    def unload(self) -> None:
        """Free everything the replica holds, as its process exiting does (cached segments too)."""
        self.release()
        for pool, block in self.held:
            pool.free(block)
        self.held.clear()
        for _, pool in self.pools:
            pool.set_non_pytorch(pool.device.non_pytorch - self.non_torch)
            pool.empty_cache()
        self.non_torch = 0

    def acquire(self, tokens: int, requests: int) -> None:
        """The activations of a step computing `tokens` tokens for `requests` requests."""
        sizes = activation_tensors(self.arch, tokens, requests, self.tensor_parallel)
        for _, pool in self.pools:
            for size in sizes:
                self.step.append((pool, pool.malloc(size)))

    def release(self) -> None:
        for pool, block in self.step:
            pool.free(block)
        self.step.clear()

