"""What the TUI, the telemetry samplers and the report read about a pool: plain, JSON-ready records.

A `PoolState` is a snapshot taken on demand (its cost is linear in the number of blocks), in the spirit of
`torch.cuda.memory_snapshot()` plus the fragmentation metrics of the caching allocator's statistics (pytorch/pytorch
`torch/cuda/memory.py`, `memory_stats`) and the textbook external fragmentation:

- `fragmentation` = (reserved - allocated) / reserved, PyTorch's "reserved but unallocated" share;
- `external_fragmentation` = 1 - largest free block / total free, over the memory the pool holds
  but has not handed out (0 when everything free is one piece, near 1 when it is dust);
- `inactive_split` = PyTorch's `inactive_split_bytes`, cached memory that `empty_cache()` cannot
  return because its segment is partly in use;
- `bins`: bytes in blocks of each power-of-two size class, allocated and cached, for a histogram;
- `segments`: every segment with its blocks in address order, for a memory map.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

BlockStateName = Literal["allocated", "awaiting_free", "cached", "slack"]
"""`allocated`: handed out; `awaiting_free`: freed but still used by another stream (PyTorch's
`active_awaiting_free`); `cached`: free and reusable inside the pool; `slack`: the tail of a slab
too small for one more object, never usable."""


@dataclass(frozen=True, slots=True)
class BlockView:
    """One block of a segment."""

    address: int
    size: int
    state: BlockStateName
    requested: int = 0
    """The unrounded size asked for, for allocated and awaiting blocks."""
    tag: str = ""
    """What an allocated block holds (`weights`, `kv_cache`, `activation`, ...), when the engine said."""


@dataclass(frozen=True, slots=True)
class SegmentView:
    """One piece of device memory the pool holds: a `cudaMalloc`, a mapped range, a slab or an arena block."""

    address: int
    size: int
    kind: str
    """`small` / `large` (caching allocator pools), `arena` (buddy), `slab` or `dedicated` (slab)."""
    stream: int
    expandable: bool
    blocks: tuple[BlockView, ...]


@dataclass(frozen=True, slots=True)
class SizeBin:
    """Bytes in blocks whose size is in [2**log2, 2**(log2 + 1))."""

    log2: int
    allocated: int
    cached: int


@dataclass(frozen=True)
class PoolState:
    """A snapshot of one GPU's memory pool. All sizes in bytes; `to_dict()` is JSON-serialisable."""

    allocator: str
    device: int
    capacity: int
    """Total device memory (`cudaMemGetInfo` total)."""
    held_outside: int
    """Memory outside the pool: this process's non-PyTorch memory and other processes."""
    reserved: int
    allocated: int
    requested: int
    active: int
    """Allocated plus awaiting free."""
    cached: int
    """Free memory inside the pool (reserved and neither allocated, awaiting nor slack)."""
    free: int
    """Device free: capacity - reserved - held outside."""
    usage: float
    """(allocated + held outside) / capacity, the fraction the warning and critical thresholds watch."""
    level: str
    """`normal`, `warning` or `critical`."""
    fragmentation: float
    external_fragmentation: float
    inactive_split: int
    largest_free_block: int
    bins: tuple[SizeBin, ...]
    segments: tuple[SegmentView, ...]

    def to_dict(self) -> dict[str, Any]:
        """The state as nested dicts and lists of numbers and strings."""
        return dataclasses.asdict(self)


class BinCounter:
    """Accumulates bytes per log2 size class while an allocator walks its blocks."""

    def __init__(self) -> None:
        self._bins: dict[int, list[int]] = {}

    def add(self, size: int, allocated: bool, count: int = 1) -> None:
        entry = self._bins.setdefault(size.bit_length() - 1, [0, 0])
        entry[0 if allocated else 1] += size * count

    def bins(self) -> tuple[SizeBin, ...]:
        return tuple(SizeBin(k, a, c) for k, (a, c) in sorted(self._bins.items()))


def ratio(part: int, whole: int) -> float:
    """part / whole, 0.0 when whole is 0, rounded to 6 places so snapshots stay stable."""
    return round(part / whole, 6) if whole else 0.0


def external_fragmentation(largest: int, total: int) -> float:
    """1 - largest free block / total free (0.0 when nothing is free)."""
    return round(1.0 - largest / total, 6) if total else 0.0


def largest_and_total(sizes: Iterable[int]) -> tuple[int, int]:
    """The largest and the sum of some free block sizes."""
    largest = total = 0
    for size in sizes:
        total += size
        largest = max(largest, size)
    return largest, total
