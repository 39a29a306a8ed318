"""What the engine keeps in each GPU's memory pool, and what happens when the pool runs out.

Each GPU device has one pool (the scenario's allocator), shared by the replicas placed on it as if
they were one process. Loading a vLLM replica does in the pools of its tensor-parallel group what
vLLM's start-up does: check that the GPU's free memory covers the requested share, load the
weights (one tensor per layer), run the profile pass (its activation peak is allocated, freed and
handed back by `empty_cache`, as vLLM does), allocate the KV cache (one tensor per layer, sized by
the memory plan), then capture CUDA graphs. Non-PyTorch memory (CUDA context growth, cuBLAS
workspaces, NCCL) stays outside the pool.

CUDA graphs: vLLM captures the forward pass for batches of up to 512 tokens (`GRAPH_MAX_TOKENS`,
as in the cost model); captures share one private pool that holds the activations of the largest
batch for the engine's life. That is modelled as tensors tagged `cuda_graph` of the forward
activations at 512 tokens (46 MiB for Llama-3-8B; vLLM logs about 0.45 GiB for graph capture, which
also holds per-size input buffers and graph objects, so this is a lower bound). They come out of the
headroom, since the KV budget did not count them, as in vLLM before it estimated graph memory.

Steps: a step of up to 512 tokens runs its forward pass in a graph (no allocation); a larger one
runs eagerly and allocates its activation tensors (`memory.activation_tensors`). The logits and the
sampler run outside the graph, so every step of a generating model allocates its logits. Blocks are
freed when the step ends, and the caching allocator keeps their segments for the next step. The
headroom vLLM leaves (1 - utilisation) is what those allocations draw on: when another process has
taken it, a step whose tensors need a new segment fails with PyTorch's out-of-memory message, and
the engine dies as vLLM's does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..scenario.presets import GIB, ModelFamily
from .costmodel import GRAPH_MAX_TOKENS
from .memory import MemoryPlan, activation_tensors
from .pool import Allocator, Tensor
from .pool.caching import CachingAllocator
from .pool.deferred import Shape, StepMemo
from .timeline import Timeline

EAGER_SHAPES = 4096
"""Step shapes whose activation sizes (and round trips through the caching allocator, `StepMemo.kept`: about a
kilobyte each) are remembered (a server sees ever new (tokens, requests) pairs: the memory of them must not grow
without end). `scenarios/azure-conv.yaml` works out 10,271 trips for its 7,054 eager shapes with 1,024 kept,
8,660 with 4,096 (8,446 keeping every one)."""


def record_levels(pool: Allocator, gpu: str, timeline: Timeline, now: int) -> None:
    """Put the pool's warning / critical threshold crossings on the timeline."""
    if not pool.watch.events:  # the common case, once a step
        return
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


ARENA_INITIAL_CHUNK = 1 << 20
"""ONNX Runtime's BFC arena: the size of its first region (`initial_chunk_size_bytes`, 1 MiB by default)."""


@dataclass
class OrtArena:
    """The regions an ONNX Runtime session's CUDA arena (BFC) has taken from the GPU. A run's buffers come
    from a region; one that fits in none makes the arena take a new one of `max(request, next)`, where
    `next` starts at the initial chunk and doubles after each extension (`arena_extend_strategy`
    kNextPowerOfTwo, the default), and it gives nothing back while the session lives (its memory is
    reused by later runs, `onnxruntime#11627`). Triton runs one execution at a time per instance, so a run
    fits when the largest region does."""

    largest: int = 0
    next_region: int = ARENA_INITIAL_CHUNK

    def extension(self, size: int) -> int:
        """Bytes of the region a run of `size` bytes makes the arena take (0: it fits)."""
        if size <= self.largest:
            return 0
        region = max(size, self.next_region)
        self.largest = max(self.largest, region)
        self.next_region *= 2
        return region


@dataclass
class ReplicaMemory:
    """One replica's tensors in the pools of its GPUs, and its per-step activations."""

    pools: list[tuple[str, Allocator]]
    arch: ModelFamily
    tensor_parallel: int
    cuda_graphs: bool = True
    runtime: str = "vllm"
    """`vllm`, `tensorrt` or `onnxruntime`: what loading puts in the pool and what a step allocates."""
    contexts: int = 1
    """TensorRT execution contexts per GPU (one per Triton model instance on it)."""
    expert_parallel: int = 1
    """An MoE model's expert-parallel size (its fused-MoE caches are not split by TP then)."""
    held: list[Tensor] = field(default_factory=list)
    """Weights, KV cache and CUDA graph pool: held until the replica unloads or dies."""
    step: list[Tensor] = field(default_factory=list)
    """The running step's activations."""
    non_torch: int = 0
    """Bytes the replica holds outside the pool on each GPU (CUDA context growth, cuBLAS, NCCL)."""
    _eager: dict[tuple[int, int], Shape] = field(default_factory=dict, repr=False)
    """(tokens, requests) -> the step's tensors (`_eager_tensors`)."""
    _arenas: dict[str, OrtArena] = field(default_factory=dict, repr=False)
    """ONNX Runtime: each session's CUDA arena (Triton gives every model instance its own session)."""
    _memos: list[StepMemo | None] = field(default_factory=list, repr=False)
    """Per pool: the round trips of this replica's steps (`pool/deferred.py`), for vLLM's steps."""

    def __post_init__(self) -> None:
        self._pool_of = dict(self.pools)
        self._memos = [StepMemo(pool, kept=EAGER_SHAPES) if self.runtime == "vllm" and isinstance(pool, CachingAllocator)
                       else None
                       for _, pool in self.pools]

    def load(self, plan: MemoryPlan) -> None:
        """What the runtime's start-up puts in each pool; raises `OutOfMemoryError`.

        vLLM: weights, the profile pass (freed, cache emptied), KV cache, CUDA graph pool.
        TensorRT (its developer guide): the plan's weights on deserialisation, then each
        execution context's activation and scratch memory, allocated once at its maximum (Triton
        creates one context per instance; the weights are shared per device).
        ONNX Runtime: the initializers; each session's arena grows with its first runs (`OrtArena`).
        """
        layers = max(self.arch.layers, 1)
        self.non_torch = plan.non_torch
        for _, pool in self.pools:
            pool.set_non_pytorch(pool.device.non_pytorch + plan.non_torch)
            self._hold(pool, [("weights", plan.weights // layers)] * layers)
            if self.runtime == "tensorrt":
                self._hold(pool, [("execution_context", plan.activation_peak)] * self.contexts)
            if self.runtime != "vllm":
                continue
            Tensor(pool, plan.activation_peak, "activation").computed().free()
            pool.empty_cache()
            if plan.has_kv:
                self._hold(pool, [("kv_cache", plan.num_blocks * plan.block_size * plan.kv_bytes_per_token // layers)] * layers)
            if self.cuda_graphs:
                captured = self._forward(GRAPH_MAX_TOKENS, GRAPH_MAX_TOKENS)
                self._hold(pool, [("cuda_graph", size) for _, size in captured])

    def _hold(self, pool: Allocator, tensors: list[tuple[str, int]]) -> None:
        self.held += [Tensor(pool, size, tag).computed() for tag, size in tensors]

    def _forward(self, tokens: int, requests: int) -> list[tuple[str, int]]:
        return [t for t in activation_tensors(self.arch, tokens, requests, self.tensor_parallel, self.expert_parallel) if t[0] != "logits"]

    def unload(self) -> None:
        """Free everything the replica holds, as its process exiting does (cached segments too)."""
        self.release()
        for tensor in self.held:
            tensor.free()
        self.held.clear()
        self._arenas.clear()
        for _, pool in self.pools:
            pool.set_non_pytorch(pool.device.non_pytorch - self.non_torch)
            pool.empty_cache()
        self.non_torch = 0

    def acquire(self, tokens: int, requests: int) -> None:
        """The activations a step of `tokens` tokens for `requests` requests allocates (see the module docstring)."""
        if self.runtime == "tensorrt":
            return  # the execution context already holds its maximum
        eager = self._sizes(tokens, requests)  # steps of different shapes often allocate the same (their logits)
        step = self.step
        for (_, pool), memo in zip(self.pools, self._memos):
            if memo is not None and memo.begin(eager, self):
                continue  # a deferred round trip: nothing to allocate unless somebody looks (`materialize`)
            for tag, size in eager:
                step.append(Tensor(pool, size, tag))

    def materialize(self, pool: Allocator, eager: Shape) -> None:
        """Allocate a deferred step's tensors in `pool` for real (somebody reads or changes the pool)."""
        for tag, size in eager:
            self.step.append(Tensor(pool, size, tag))

    def execution(self, device: str, session: str, batch: int) -> list[Tensor]:
        """What one Triton model instance's execution of `batch` items allocates on its GPU, to hand to
        `executed` when it ends (an unload frees them before). TensorRT: nothing (its execution context
        holds its maximum). ONNX Runtime: nothing either, once the session's arena holds a region large
        enough (`OrtArena`). The Python backend: its activations, from the pool."""
        if self.runtime == "tensorrt":
            return []
        pool = self._pool_of[device]
        (tag, size), = self._sizes(batch, batch)
        if self.runtime == "onnxruntime":
            arena = self._arenas.get(session)
            if arena is None:
                arena = self._arenas[session] = OrtArena()
            region = arena.extension(size)
            if region:
                self._hold(pool, [("onnxruntime_arena", region)])
            return []
        tensors = [Tensor(pool, size, tag)]
        self.step += tensors
        return tensors

    def executed(self, tensors: list[Tensor]) -> None:
        """An execution has ended: free what it allocated."""
        for tensor in tensors:
            tensor.computed().free()
            self.step.remove(tensor)

    def _sizes(self, tokens: int, requests: int) -> Shape:
        if tokens <= GRAPH_MAX_TOKENS and self.cuda_graphs and self.runtime == "vllm":
            # in a graph only the logits, one row per sampled sequence (a conditional, not min(): once per step)
            tokens = requests = tokens if tokens < requests else requests  # noqa: FURB136 (hot path)
        shape = (tokens, requests)
        eager = self._eager.get(shape)
        if eager is None:  # a step's shapes repeat: size them once
            if len(self._eager) >= EAGER_SHAPES:
                self._eager.clear()
            eager = self._eager[shape] = self._eager_tensors(tokens, requests)
        return eager

    def _eager_tensors(self, tokens: int, requests: int) -> Shape:
        """(tag, bytes) of what a step allocates: outside CUDA graphs, vLLM's forward pass; under them, only
        the logits; ONNX Runtime's session and the Python backend need one buffer per run."""
        eager = activation_tensors(self.arch, tokens, requests, self.tensor_parallel, self.expert_parallel)
        if self.runtime == "vllm" and self.cuda_graphs and tokens <= GRAPH_MAX_TOKENS:
            eager = [t for t in eager if t[0] == "logits"]
        elif self.runtime != "vllm":
            eager = [("run", sum(size for _, size in eager))]
        return tuple((f"activation:{name}", size) for name, size in eager)

    def release(self) -> None:
        """The step has ended: its activations are computed and dropped."""
        for memo in self._memos:
            if memo is not None and memo.deferred:
                memo.end(self)
        step = self.step
        if step:
            for tensor in step:
                tensor.computed().free()
            step.clear()
