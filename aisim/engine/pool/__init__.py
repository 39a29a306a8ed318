"""Simulated GPU memory allocators: PyTorch's caching allocator, a buddy and a slab allocator.

    from aisim.engine.pool import make_allocator, OutOfMemoryError
    pool = make_allocator(gpu.memory_pool, capacity=gpu.resolved().capacity)
    block = pool.malloc(20 * 2**20, stream=0)
    pool.free(block)
    pool.memory_stats()        # torch.cuda.memory_stats() keys
    pool.state().to_dict()     # PoolState: metrics, size bins, memory map
    pool.drain_events()        # warning / critical threshold crossings

Modules, one concept each: `base` (the interface and stream-ordered frees), `device` (cudaMalloc
and memory outside the pool), `rounding` (PyTorch's size rules), `freelist` (the best-fit index),
`blocks` / `caching` / `expandable` (the caching allocator), `buddy`, `slab`, `stats`
(`memory_stats`), `oom` (the error text), `state` (`PoolState`), `thresholds`, `tensor` (a tensor's life), `factory`;
`snapshot` / `replay` / `replayer` read PyTorch memory snapshots and replay them through the models.
"""

from .base import Allocation, Allocator
from .buddy import BuddyAllocator
from .caching import CachingAllocator, CachingConfig, TraceEntry
from .device import SimulatedDevice
from .factory import make_allocator
from .oom import OutOfMemoryError, format_size, oom_message
from .rounding import allocation_size, round_size
from .slab import SlabAllocator
from .state import BlockView, PoolState, SegmentView, SizeBin
from .tensor import Tensor, TensorState, TensorStateError
from .thresholds import ThresholdEvent

__all__ = [
    "Allocation",
    "Allocator",
    "BlockView",
    "BuddyAllocator",
    "CachingAllocator",
    "CachingConfig",
    "OutOfMemoryError",
    "PoolState",
    "SegmentView",
    "SimulatedDevice",
    "SizeBin",
    "SlabAllocator",
    "Tensor",
    "TensorState",
    "TensorStateError",
    "ThresholdEvent",
    "TraceEntry",
    "allocation_size",
    "format_size",
    "make_allocator",
    "oom_message",
    "round_size",
]
