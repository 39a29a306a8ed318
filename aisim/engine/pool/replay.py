"""Replay a recorded PyTorch allocator trace through a modelled allocator and say where they differ.

The recorded device trace (pytorch/pytorch `torch/cuda/memory.py`, `_snapshot`) is fed, event by event, to a fresh
allocator model:

- `alloc` -> `malloc(size, stream)`; the model's block is kept under the recorded address.
- `free_requested` directly followed by its `free_completed` (a same-stream free) -> `free`.
  A `free_requested` whose `free_completed` comes later (`record_stream`) leaves the block unusable
  by the model until that `free_completed` too. The old single `free` action is a plain free.
- `segment_alloc` / `segment_free` (and `segment_map` / `segment_unmap`) are the recorded
  allocator's own decisions: they give the recorded reserved memory to compare with, while the
  model makes its own. A run of segment frees that is not the allocator's retry after a failed
  `cudaMalloc` is a user's `torch.cuda.empty_cache()`, so the model empties its cache there too
  (`replayer.py` says how the two are told apart).
- `oom` -> the model is asked for the same (rounded) size: either it runs out too, or it serves it
  and the block is freed at once (the recorded program got the exception, not the tensor).

A snapshot that starts mid-life is handled as `MemoryViz.js` does (pytorch/pytorch `torch/utils/viz/MemoryViz.js`): a
free whose address had no earlier `alloc`, and an `active_allocated` block of `segments` that the trace never touches,
are allocations made before the ring buffer started; they are allocated in the model, in address order, before the first
event. The model starts with an empty cache, where the recorded allocator may have held cached segments: the recorded
reserved memory at trace start is derived from `segments` minus the trace's segment events, and the difference shows
from the first event on.

A model out-of-memory is recorded (event, time, size, PyTorch's message) and that allocation is
skipped, with its later frees. Capacity: the given one; else, when the trace has an `oom`, what the
recorded allocator could have had then (its reserved memory plus the entry's `device_free`); else
80 GiB. The buddy model reserves its whole arena up front, so its reserved memory is the capacity.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ...scenario.hardware import BuddyPool, CachingPool, MemoryPool, SlabPool
from .base import Allocator
from .caching import CachingAllocator, CachingConfig
from .device import SimulatedDevice
from .factory import make_allocator
from .oom import format_size
from .replayer import (
    SEGMENT_GROW,
    SEGMENT_SHRINK,
    Divergence,
    ModelOom,
    Replayer,
    Sample,
)
from .rounding import LARGE_BUFFER, UNLIMITED
from .snapshot import Snapshot, SnapshotError, TraceEvent, divisions_from_setting

GiB = 1 << 30
DEFAULT_CAPACITY = 80 * GiB
ALLOCATORS = ("caching", "buddy", "slab")
SAMPLES = 200
"""Samples of the series when `sample_every` is not given."""
FREES = frozenset(("free", "free_requested", "free_completed"))


@dataclass(frozen=True)
class ReplayResult:
    """One allocator model against one recorded device trace. Sizes in bytes; `to_dict()` is JSON-ready."""

    allocator: str
    device: int
    capacity: int
    capacity_source: str
    """`given`, `oom` (derived from the first recorded `oom`) or `default`."""
    events: int
    actions: dict[str, int]
    initial_blocks: int
    """Allocations alive before the trace started, allocated in the model first."""
    initial_bytes: int
    peak_reserved: int
    peak_allocated: int
    final_reserved: int
    final_allocated: int
    recorded_start_reserved: int
    recorded_peak_reserved: int
    recorded_final_reserved: int
    initial_segment_allocs: int
    """Model `cudaMalloc`s (and mapped ranges, `num_device_alloc`) for the initial allocations (the buddy arena too)."""
    segment_allocs: int
    """Model `cudaMalloc`s during the trace, to compare with the recorded `segment_alloc` (and `segment_map`) count."""
    recorded_segment_allocs: int
    segment_frees: int
    """Model `cudaFree`s (and unmapped ranges) during the trace."""
    recorded_segment_frees: int
    ooms: tuple[ModelOom, ...]
    recorded_ooms: int
    recorded_ooms_served: int
    """Recorded `oom`s where the model had room."""
    empty_cache_calls: int
    skipped_frees: int
    """Frees of allocations the model could not make."""
    inconsistent_events: int
    """Frees of addresses not allocated, allocations over live addresses: a trace that contradicts itself."""
    mean_fragmentation: float
    """Mean of the samples' (reserved - allocated) / reserved."""
    peak_fragmentation: float
    max_difference: int
    """Largest |model - recorded| reserved memory after an alloc, free, `oom` or `empty_cache`."""
    tolerance: int
    first_divergence: Divergence | None
    samples: tuple[Sample, ...]
    notes: tuple[str, ...]

    @property
    def peak_difference(self) -> int:
        """Model peak reserved minus recorded peak reserved."""
        return self.peak_reserved - self.recorded_peak_reserved

    def summary(self) -> str:
        """One sentence: how the model's peak compares with the recorded one, and where they first part."""
        diff = self.peak_difference
        peak = f"{self.allocator}: peak reserved {format_size(self.peak_reserved)}, " + (
            "the same as recorded" if diff == 0 else
            f"{format_size(abs(diff))} {'more' if diff > 0 else 'less'} than recorded ({format_size(self.recorded_peak_reserved)})"
        )
        first = self.first_divergence
        if first is None:
            return f"{peak}; model and recorded reserved never differ by more than {format_size(self.tolerance)}"
        return (
            f"{peak}; they first differ by more than {format_size(self.tolerance)} after event {first.event:,} "
            f"({first.action}): {format_size(first.reserved)} vs {format_size(first.recorded_reserved)}"
        )

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain data, plus `peak_difference` and the `summary` sentence."""
        data = dataclasses.asdict(self)
        data["peak_difference"] = self.peak_difference
        data["summary"] = self.summary()
        return data


def caching_config(settings: dict[str, Any]) -> tuple[CachingConfig, list[str]]:
    """The caching model configured like the recorded allocator (its `allocator_settings`), and what was taken."""
    taken = []
    max_split = settings.get("max_split_size")
    if type(max_split) is not int or max_split <= 0 or max_split >= UNLIMITED >> 1 or max_split < LARGE_BUFFER:
        max_split = None
    else:
        taken.append(f"max_split_size {format_size(max_split)}")
    expandable = settings.get("expandable_segments") is True
    if expandable:
        taken.append("expandable_segments")
    divisions = divisions_from_setting(settings.get("roundup_power2_divisions"))
    if divisions is not None:
        taken.append("roundup_power2_divisions")
    return CachingConfig(max_split_size=max_split, roundup_power2_divisions=divisions, expandable_segments=expandable), taken


def build_model(allocator: str | MemoryPool, capacity: int, device: int, settings: dict[str, Any]) -> tuple[Allocator, list[str]]:
    """A fresh allocator model; the caching one by name takes the snapshot's allocator settings."""
    if allocator == "caching":
        config, taken = caching_config(settings)
        notes = [f"caching model set from allocator_settings: {', '.join(taken)}"] if taken else []
        return CachingAllocator(SimulatedDevice(capacity, index=device), config), notes
    specs: dict[str, MemoryPool] = {
        "buddy": BuddyPool.model_validate({"allocator": "buddy"}),
        "slab": SlabPool.model_validate({"allocator": "slab"}),
    }
    if isinstance(allocator, str):
        if allocator not in specs:
            raise ValueError(f"unknown allocator {allocator!r}; choose one of {', '.join(ALLOCATORS)}")
        allocator = specs[allocator]
    if not isinstance(allocator, (CachingPool, BuddyPool, SlabPool)):
        raise TypeError(f"not an allocator name or memory pool: {allocator!r}")
    notes = ["the buddy model reserves its whole arena (the capacity) up front"] if isinstance(allocator, BuddyPool) else []
    return make_allocator(allocator, capacity, device_index=device), notes


@dataclass
class _Recorded:
    """What a first pass over the trace learns: start state, initial allocations, first `oom`."""

    start_reserved: int
    initial: dict[int, tuple[int, int]]
    """Address -> (requested size, stream) of allocations alive before the trace started."""
    oom_capacity: int | None
    notes: list[str]


def _survey(trace: tuple[TraceEvent, ...], snapshot: Snapshot, device: int) -> _Recorded:
    seen: set[int] = set()
    initial: dict[int, tuple[int, int]] = {}
    net = low = 0
    oom_at: tuple[int, int] | None = None
    for action, addr, size, stream, _ in trace:
        if action == "alloc":
            seen.add(addr)
        elif action in FREES:
            if addr not in seen:
                seen.add(addr)
                initial[addr] = (size, stream)
        elif action in SEGMENT_GROW:
            net += size
        elif action in SEGMENT_SHRINK:
            net -= size
            low = min(low, net)
        elif action == "oom" and oom_at is None:
            oom_at = (net, addr)
    notes = []
    segments = snapshot.device_segments(device)
    if segments is None:
        start = -low
        notes.append("the snapshot has no segments: recorded reserved memory at trace start is the least the trace allows")
    else:
        start = sum(s.total_size for s in segments) - net
        if start + low < 0:
            notes.append("the trace frees more segment memory than the snapshot's segments account for")
            start = -low
        for segment in segments:
            for block in segment.blocks:
                if block.state == "active_allocated" and block.address not in seen:
                    initial[block.address] = (block.requested_size or block.size, segment.stream)
    oom_capacity = None if oom_at is None else start + oom_at[0] + oom_at[1]
    return _Recorded(start, dict(sorted(initial.items())), oom_capacity, notes)


def replay(
    snapshot: Snapshot,
    allocator: str | MemoryPool = "caching",
    *,
    device: int = 0,
    capacity: int | None = None,
    sample_every: int | None = None,
    tolerance: int = LARGE_BUFFER,
) -> ReplayResult:
    """Replay `snapshot`'s trace of `device` through a fresh `allocator` model (see the module docstring).

    Args:
        allocator: `caching` (configured from the snapshot's `allocator_settings`), `buddy`, `slab`, or a
            scenario memory pool spec such as `CachingPool(allocator="caching", max_split_size=...)`.
        capacity: the GPU's memory in bytes; None derives it from the first recorded `oom`, else 80 GiB.
        sample_every: events between samples of the series (default: about 200 samples).
        tolerance: reserved-memory difference that counts as the first divergence (default 20 MiB).
    """
    trace = snapshot.trace(device)
    if not trace and device >= len(snapshot.traces):
        raise SnapshotError(f"no trace for device {device}: the snapshot records {len(snapshot.traces)} device(s)")
    recorded = _survey(trace, snapshot, device)
    notes = list(recorded.notes)
    if capacity is not None:
        source = "given"
    elif recorded.oom_capacity is not None:
        capacity, source = recorded.oom_capacity, "oom"
        notes.append(f"capacity {format_size(capacity)}: recorded reserved memory plus device_free at the first oom")
    else:
        capacity, source = DEFAULT_CAPACITY, "default"
    pool, model_notes = build_model(allocator, capacity, device, snapshot.settings)
    notes += model_notes
    name = pool.kind if isinstance(allocator, str) else f"{pool.kind} (spec)"
    every = max(1, sample_every or -(-len(trace) // SAMPLES))
    loop = Replayer(pool, trace, capacity, recorded.start_reserved, every, tolerance)
    loop.allocate_initial(recorded.initial)
    initial_allocs, initial_frees = pool.stats.num_device_alloc, pool.stats.num_device_free
    loop.run()
    stats = pool.stats
    stats.settle()  # peaks read directly below
    fragmentation = [s.fragmentation for s in loop.samples]
    return ReplayResult(
        allocator=name,
        device=device,
        capacity=capacity,
        capacity_source=source,
        events=len(trace),
        actions=dict(sorted(loop.actions.items())),
        initial_blocks=len(recorded.initial),
        initial_bytes=sum(size for size, _ in recorded.initial.values()),
        peak_reserved=stats.reserved_bytes[0].peak,
        peak_allocated=stats.allocated_bytes[0].peak,
        final_reserved=stats.reserved_bytes[0].current,
        final_allocated=stats.allocated_bytes[0].current,
        recorded_start_reserved=recorded.start_reserved,
        recorded_peak_reserved=loop.recorded_peak,
        recorded_final_reserved=loop.recorded_reserved,
        initial_segment_allocs=initial_allocs,
        segment_allocs=stats.num_device_alloc - initial_allocs,
        recorded_segment_allocs=loop.recorded_segment_allocs,
        segment_frees=stats.num_device_free - initial_frees,
        recorded_segment_frees=loop.recorded_segment_frees,
        ooms=tuple(loop.ooms),
        recorded_ooms=loop.recorded_ooms,
        recorded_ooms_served=loop.served,
        empty_cache_calls=loop.empty_cache_calls,
        skipped_frees=loop.skipped_frees,
        inconsistent_events=loop.inconsistent,
        mean_fragmentation=round(sum(fragmentation) / len(fragmentation), 6),
        peak_fragmentation=max(fragmentation),
        max_difference=loop.max_difference,
        tolerance=tolerance,
        first_divergence=loop.first,
        samples=tuple(loop.samples),
        notes=tuple(notes),
    )


def replay_all(
    snapshot: Snapshot,
    allocators: tuple[str, ...] = ALLOCATORS,
    **options: Any,
) -> list[ReplayResult]:
    """`replay` through each named allocator model, in order."""
    return [replay(snapshot, name, **options) for name in allocators]
