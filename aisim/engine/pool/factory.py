"""Build the allocator a scenario's `memoryPool` asks for."""

from __future__ import annotations

from collections.abc import Callable

from ...scenario.hardware import BuddyPool, CachingPool, MemoryPool, SlabPool
from .base import Allocator
from .buddy import BuddyAllocator
from .caching import CachingAllocator, CachingConfig
from .device import SimulatedDevice
from .slab import SlabAllocator


def make_allocator(
    pool_spec: MemoryPool,
    capacity: int,
    *,
    device_index: int = 0,
    non_pytorch: int = 0,
    other_processes: dict[int, int] | None = None,
    memory_fraction: float | None = None,
    nvml: bool = True,
    clock: Callable[[], int] | None = None,
) -> Allocator:
    """The allocator for one GPU of `capacity` bytes (the capacity software reports).

    `reservedFraction` of the capacity plus `non_pytorch` bytes are this process's memory outside the
    pool (CUDA context, cuBLAS, NCCL); `other_processes` maps pids to the bytes they hold. The
    scenario has no memory-fraction field, so `garbageCollectionThreshold` acts only when the caller
    passes `memory_fraction`, exactly as PyTorch ignores the threshold without
    `set_per_process_memory_fraction`.
    """
    device = SimulatedDevice(
        capacity,
        index=device_index,
        non_pytorch=round(pool_spec.reserved_fraction * capacity) + non_pytorch,
        other_processes=other_processes,
        nvml=nvml,
    )
    warning, critical = pool_spec.thresholds.warning, pool_spec.thresholds.critical
    if isinstance(pool_spec, CachingPool):
        config = CachingConfig(
            max_split_size=pool_spec.max_split_size,
            roundup_power2_divisions=pool_spec.roundup_power2_divisions,
            garbage_collection_threshold=pool_spec.garbage_collection_threshold,
            memory_fraction=memory_fraction,
            expandable_segments=pool_spec.expandable_segments,
        )
        return CachingAllocator(device, config, warning=warning, critical=critical, clock=clock)
    if isinstance(pool_spec, BuddyPool):
        return BuddyAllocator(device, pool_spec.min_block, warning=warning, critical=critical, clock=clock)
    if isinstance(pool_spec, SlabPool):
        return SlabAllocator(
            device, pool_spec.size_classes, pool_spec.slab_size, warning=warning, critical=critical, clock=clock
        )
    raise TypeError(f"unknown memory pool {type(pool_spec).__name__}")
