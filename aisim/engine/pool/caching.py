"""PyTorch's CUDA caching allocator (`c10/cuda/CUDACachingAllocator.cpp`), rule for rule.

- Requests are rounded (`round_size`: 512 B, or power-of-two divisions) and go to the small pool
  (<= 1 MiB) or the large pool; each pool keeps free blocks per stream, and a block is reused only
  on the stream it was allocated on.
- Best fit: the smallest cached block on the stream that fits, lowest address on ties; with
  `max_split_size`, a block at least that large serves only requests at least that large and
  at most `max_non_split_rounding` (20 MiB) smaller than it.
- A miss asks the device for a segment of 2 MiB (small), 20 MiB (under 10 MiB) or the request
  rounded up to 2 MiB. The front of the found block is handed out and the rest split off when the
  remainder is at least 512 B (small pool, expandable segments) or above 1 MiB (large pool, and
  only for requests below `max_split_size`). Frees merge with free neighbours of the same segment.
- When the device refuses: free cached oversize blocks and retry; then wait for all streams, free
  every wholly free segment and retry (`num_alloc_retries`); then raise `OutOfMemoryError` with
  PyTorch's text (`num_ooms`).
- Optional: a per-process memory fraction (`set_per_process_memory_fraction`) with
  `garbage_collection_threshold`, and expandable segments (`expandable.py`).

CUDA graph private pools, free-memory callbacks and IPC are not modelled. Reference:
pytorch/pytorch `c10/cuda/CUDACachingAllocator.cpp`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from . import expandable
from .base import Allocation, Allocator
from .blocks import Block, BlockPool, try_merge
from .device import SimulatedDevice
from .oom import OutOfMemoryError
from .rounding import (
    LARGE_BUFFER,
    MIN_BLOCK,
    MIN_LARGE_ALLOC,
    ROUND_LARGE,
    SMALL_BUFFER,
    SMALL_SIZE,
    UNLIMITED,
    Divisions,
    round_size,
)
from .state import (
    BinCounter,
    BlockView,
    PoolState,
    SegmentView,
)
from .stats import decrease, increase


@dataclass(frozen=True)
class CachingConfig:
    """The `PYTORCH_CUDA_ALLOC_CONF` options the model honours (sizes in bytes)."""

    max_split_size: int | None = None
    """`max_split_size_mb`: blocks this large are never split; None is unlimited. At least 20 MiB."""
    max_non_split_rounding: int = LARGE_BUFFER
    """`max_non_split_rounding_mb`: how much larger than an oversize request a reused block may be."""
    roundup_power2_divisions: Divisions = None
    """One value, or 16 values for the octaves from 1 MiB to 64 GiB; None or 1 is off."""
    garbage_collection_threshold: float | None = None
    """In (0, 1); acts only together with `memory_fraction`, as in PyTorch."""
    memory_fraction: float | None = None
    """`set_per_process_memory_fraction`: cap reserved memory at this share of the total."""
    expandable_segments: bool = False
    expandable_page_size: int = LARGE_BUFFER
    """Page size of large-pool expandable segments (`large_segment_size_mb`); the small pool maps 2 MiB."""

    def __post_init__(self) -> None:
        if self.max_split_size is not None and self.max_split_size < LARGE_BUFFER:
            raise ValueError("CachingAllocator option max_split_size_mb too small, must be >= 20")
        gc = self.garbage_collection_threshold
        if gc is not None and not 0 < gc < 1:
            raise ValueError("garbage_collect_threshold too small, set it 0.0~1.0")
        if self.memory_fraction is not None and not 0 <= self.memory_fraction <= 1:
            raise ValueError(f"Invalid fraction value: {self.memory_fraction}. Allowed range: 0~1")
        divisions = self.roundup_power2_divisions
        if isinstance(divisions, tuple) and len(divisions) != 16:
            raise ValueError("roundup_power2_divisions needs one value or 16 (one per octave from 1 MiB)")
        if self.expandable_page_size <= 0 or self.expandable_page_size % SMALL_BUFFER:
            raise ValueError("expandable_page_size must be a positive multiple of 2 MiB")


class TraceEntry(NamedTuple):
    """One entry of the allocator's history (`torch.cuda.memory._snapshot()["device_traces"]`)."""

    action: str
    addr: int
    """The block or segment address; for `oom`, the device's free bytes (PyTorch's `device_free`)."""
    size: int
    stream: int
    time_ns: int | None


class CachingAllocator(Allocator):
    """`DeviceCachingAllocator` for one GPU."""

    kind = "caching"
    pool_split = True

    def __init__(
        self,
        device: SimulatedDevice,
        config: CachingConfig | None = None,
        *,
        warning: float = 0.85,
        critical: float = 0.92,
        clock: Callable[[], int] | None = None,
    ) -> None:
        config = config or CachingConfig()
        max_split = UNLIMITED if config.max_split_size is None else config.max_split_size
        super().__init__(
            device,
            warning=warning,
            critical=critical,
            clock=clock,
            max_split_size=-1 if max_split == UNLIMITED else max_split,
        )
        self.config = config
        self._max_split = max_split
        self._non_split = config.max_non_split_rounding
        self._divisions = config.roundup_power2_divisions if config.roundup_power2_divisions != 1 else None
        self._expandable = config.expandable_segments
        self.small_page = SMALL_BUFFER
        self.large_page = config.expandable_page_size
        self._allowed: int | None = None
        if config.memory_fraction is not None:
            self._allowed = int(config.memory_fraction * device.capacity)
        self._gc = self._allowed is not None and bool(config.garbage_collection_threshold)
        self._small = BlockPool(small=True)
        self._large = BlockPool(small=False)
        self._active: set[Block] = set()
        self._clock = clock
        self.history: deque[TraceEntry] | None = None
        """The trace ring buffer while `record_history` is on."""

    # history

    def record_history(self, enabled: bool = True, max_entries: int = 100_000) -> None:
        """`torch.cuda.memory._record_memory_history`: keep the last `max_entries` trace entries."""
        self._settle()
        self.history = deque(maxlen=max(1, max_entries)) if enabled else None

    def trace(self, action: str, addr: int, size: int, stream: int) -> None:
        if self.history is not None:
            self.history.append(TraceEntry(action, addr, size, stream, self._clock() if self._clock else None))

    # malloc

    def can_defer(self) -> bool:
        return (self._deferred is None and not self._pending and self.history is None and not self._gc
                and not self._expandable)

    def malloc(self, size: int, stream: int = 0) -> Allocation:
        """`DeviceCachingAllocator::malloc`."""
        if self._deferred is not None:
            self._settle()
        self.version += 1
        if size <= 0:
            if size == 0:
                return self._null(stream)
            raise ValueError("size must not be negative")
        self.ops += 1
        if self._pending:
            self.process_events()
        rounded = self.rounded(size)
        if rounded <= SMALL_SIZE:
            pool = self._small
            alloc_size = SMALL_BUFFER
        else:
            pool = self._large
            alloc_size = LARGE_BUFFER if rounded < MIN_LARGE_ALLOC else -(-rounded // ROUND_LARGE) * ROUND_LARGE
        block = self._get_free_block(pool, stream, rounded)
        if block is None:
            if self._gc:
                self._garbage_collect()
            block = self._alloc_block(pool, stream, rounded, alloc_size, False)
            if block is None and self._release_available_cached_blocks(pool, stream, rounded):
                block = self._alloc_block(pool, stream, rounded, alloc_size, False)
            if block is None:
                self._release_cached_blocks()
                block = self._alloc_block(pool, stream, rounded, alloc_size, True)
            if block is None:
                raise self._out_of_memory(size, rounded, alloc_size, stream)
        block = self._alloc_found_block(block, rounded, size, self.splits(pool, rounded, block.size - rounded))
        self._check_level()
        return block

    def rounded(self, size: int) -> int:
        """`round_size` of a request of `size` bytes (its common case inlined: malloc asks it every time)."""
        if self._divisions is None:
            return -(-size // MIN_BLOCK) * MIN_BLOCK
        return round_size(size, self._divisions)

    def splits(self, pool: BlockPool, size: int, remaining: int) -> bool:
        """Whether a cached block found for `size` bytes is split, `remaining` bytes of it cached again."""
        if pool.small or self._expandable:
            return remaining >= MIN_BLOCK
        return size < self._max_split and remaining > SMALL_SIZE

    def refuses(self, size: int, block_size: int) -> bool:
        """`get_free_block`'s oversize rules: a cached block of `block_size` bytes does not serve `size`."""
        max_split = self._max_split
        return (size < max_split <= block_size) or (size >= max_split and block_size >= size + self._non_split)

    def _get_free_block(self, pool: BlockPool, stream: int, size: int) -> Block | None:
        """`get_free_block`: best fit on (stream, size, address), with the oversize rules."""
        if self._gc:
            pool.gc_calls += 1
        index = pool.free.get(stream)
        if index is None:
            return None
        block = index.lower_bound(size)
        if block is None:
            return None
        if block.segment is not None:
            # Expandable segments: judge a block by the size it can grow to (its free size plus
            # the unmapped range behind it), so prefer a later block that grows less.
            current = block
            for following in index.iter_from(size):
                if following is current:
                    continue
                if current.segment is None or _expandable_size(following) >= _expandable_size(current):
                    break
                current = following
            block = current
        if self.refuses(size, block.size):
            return None
        index.remove(block)
        return block

    def _alloc_block(self, pool: BlockPool, stream: int, size: int, alloc_size: int, retry: bool) -> Block | None:
        """`alloc_block`: a new segment (or mapped pages) from the device, or None."""
        stats = self.stats
        if retry:
            stats.num_alloc_retries += 1
        if self._allowed is not None and stats.reserved_bytes[0].current + alloc_size > self._allowed:
            return None
        if self._expandable:
            return expandable.try_allocate_expandable_block(self, pool, stream, size)
        address = self.device.malloc(alloc_size)
        if address is None:
            return None
        block = Block(address, alloc_size, stream, pool)
        increase(stats.segment, pool.index, 1)
        increase(stats.reserved_bytes, pool.index, alloc_size)
        if alloc_size >= self._max_split:
            stats.oversize_segments.increase(1)
        stats.num_device_alloc += 1
        self.trace("segment_alloc", address, alloc_size, stream)
        return block

    def _alloc_found_block(self, block: Block, size: int, requested: int, split: bool) -> Block:
        """`alloc_found_block`: hand out the front of `block`, caching the remainder if split."""
        stats = self.stats
        pool = block.pool
        pi = pool.index
        already_split = block.prev is not None or block.next is not None
        if split:
            remaining = block
            block = Block(remaining.address, size, remaining.stream, pool)
            block.segment = remaining.segment
            block.prev = remaining.prev
            if block.prev is not None:
                block.prev.next = block
            block.next = remaining
            remaining.prev = block
            remaining.address += size
            remaining.size -= size
            pool.insert(remaining)
            if block.segment is None:
                if already_split:
                    decrease(stats.inactive_split_bytes, pi, size)
                else:
                    increase(stats.inactive_split_bytes, pi, remaining.size)
                    increase(stats.inactive_split, pi, 1)
        elif already_split and block.segment is None:
            decrease(stats.inactive_split_bytes, pi, block.size)
            decrease(stats.inactive_split, pi, 1)
        block.allocated = True
        block.requested_size = requested
        self._active.add(block)
        size = block.size
        # increase(stats.<array>, pi, amount) of five arrays, written out: this runs for every tensor of every step
        stat, pooled = stats.allocation[0], stats.allocation[pi]
        stat.current += 1
        stat.allocated += 1
        if stat.current > stat.peak:  # noqa: PLR1730
            stat.peak = stat.current
        pooled.current += 1
        pooled.allocated += 1
        if pooled.current > pooled.peak:  # noqa: PLR1730
            pooled.peak = pooled.current
        stat, pooled = stats.allocated_bytes[0], stats.allocated_bytes[pi]
        stat.current += size
        stat.allocated += size
        if stat.current > stat.peak:  # noqa: PLR1730
            stat.peak = stat.current
        pooled.current += size
        pooled.allocated += size
        if pooled.current > pooled.peak:  # noqa: PLR1730
            pooled.peak = pooled.current
        stat, pooled = stats.active[0], stats.active[pi]
        stat.current += 1
        stat.allocated += 1
        if stat.current > stat.peak:  # noqa: PLR1730
            stat.peak = stat.current
        pooled.current += 1
        pooled.allocated += 1
        if pooled.current > pooled.peak:  # noqa: PLR1730
            pooled.peak = pooled.current
        stat, pooled = stats.active_bytes[0], stats.active_bytes[pi]
        stat.current += size
        stat.allocated += size
        if stat.current > stat.peak:  # noqa: PLR1730
            stat.peak = stat.current
        pooled.current += size
        pooled.allocated += size
        if pooled.current > pooled.peak:  # noqa: PLR1730
            pooled.peak = pooled.current
        stat, pooled = stats.requested_bytes[0], stats.requested_bytes[pi]
        stat.current += requested
        stat.allocated += requested
        if stat.current > stat.peak:  # noqa: PLR1730
            stat.peak = stat.current
        pooled.current += requested
        pooled.allocated += requested
        if pooled.current > pooled.peak:  # noqa: PLR1730
            pooled.peak = pooled.current
        if size >= self._max_split:
            stats.oversize_allocations.increase(1)
        if self.history is not None:
            self.trace("alloc", block.address, requested, block.stream)
        return block

    # free

    def _free_requested(self, block: Block) -> None:  # type: ignore[override]
        """The synchronous half of `free`: allocation counts drop at once."""
        pi = block.pool.index
        stats = self.stats
        size = block.size
        # decrease(stats.<array>, pi, amount), written out (hot path)
        stat, pooled = stats.allocation[0], stats.allocation[pi]
        stat.current -= 1
        stat.freed += 1
        pooled.current -= 1
        pooled.freed += 1
        stat, pooled = stats.allocated_bytes[0], stats.allocated_bytes[pi]
        stat.current -= size
        stat.freed += size
        pooled.current -= size
        pooled.freed += size
        if self.history is not None:
            self.trace("free_requested", block.address, block.requested_size, block.stream)
        if block.size >= self._max_split:
            self.stats.oversize_allocations.decrease(1)

    def _free_block(self, block: Block) -> None:  # type: ignore[override]
        """`free_block`: merge with free neighbours, cache, and update the split and active stats."""
        if self.history is not None:
            self.trace("free_completed", block.address, block.requested_size, block.stream)
        stats = self.stats
        size = block.size
        requested = block.requested_size
        pool = block.pool
        count = 0
        nbytes = 0
        merged = try_merge(block, block.prev)
        if merged:
            count -= 1
            nbytes -= merged
        merged = try_merge(block, block.next)
        if merged:
            count -= 1
            nbytes -= merged
        self._active.discard(block)
        pool.insert(block)
        if block.prev is not None or block.next is not None:
            count += 1
            nbytes += block.size
        pi = pool.index
        if block.segment is None:
            if count > 0:
                increase(stats.inactive_split, pi, count)
            elif count < 0:
                decrease(stats.inactive_split, pi, -count)
            if nbytes > 0:
                increase(stats.inactive_split_bytes, pi, nbytes)
            elif nbytes < 0:
                decrease(stats.inactive_split_bytes, pi, -nbytes)
        # decrease(stats.<array>, pi, amount), written out (hot path)
        stat, pooled = stats.active[0], stats.active[pi]
        stat.current -= 1
        stat.freed += 1
        pooled.current -= 1
        pooled.freed += 1
        stat, pooled = stats.active_bytes[0], stats.active_bytes[pi]
        stat.current -= size
        stat.freed += size
        pooled.current -= size
        pooled.freed += size
        stat, pooled = stats.requested_bytes[0], stats.requested_bytes[pi]
        stat.current -= requested
        stat.freed += requested
        pooled.current -= requested
        pooled.freed += requested

    # releasing cached memory

    def empty_cache(self) -> None:
        """`torch.cuda.empty_cache()`: `release_cached_blocks`."""
        self._settle()
        self.version += 1
        self._release_cached_blocks()

    def _release_cached_blocks(self) -> None:
        """Wait for all streams, then free every unsplit cached segment (unmap free pages if expandable)."""
        self.synchronize()
        self._release_blocks(self._large)
        self._release_blocks(self._small)

    def _release_blocks(self, pool: BlockPool) -> None:
        to_unmap = []
        for block in pool.ordered():
            if block.segment is not None:
                to_unmap.append(block)
            elif block.prev is None and block.next is None:
                self._release_block(block)
        for block in to_unmap:
            expandable.unmap_block(self, block)
            if block.prev is None and block.next is None and not block.mapped:
                expandable.release_expandable_segment(self, block)

    def _release_block(self, block: Block) -> None:
        """`release_block`: `cudaFree` a wholly free segment."""
        stats = self.stats
        stats.num_device_free += 1
        self.trace("segment_free", block.address, block.size, block.stream)
        self.device.free(block.address)
        pi = block.pool.index
        decrease(stats.segment, pi, 1)
        decrease(stats.reserved_bytes, pi, block.size)
        if block.size >= self._max_split:
            stats.oversize_segments.decrease(1)
        block.pool.remove(block)

    def _release_available_cached_blocks(self, pool: BlockPool, stream: int, size: int) -> bool:
        """Free cached oversize segments (>= max_split_size) on the stream, enough for the request."""
        if self._max_split == UNLIMITED:
            return False
        index = pool.free.get(stream)
        if index is None:
            return False
        key = max(size, self._max_split)
        block = index.lower_bound(key)
        if block is not None and block.segment is None:
            self._release_block(block)
            return True
        released = 0
        for block in reversed(index.ordered()):
            if released >= key or block.size < self._max_split:
                break
            if block.segment is None and block.size < key:
                released += block.size
                self._release_block(block)
        return released >= key

    def _garbage_collect(self) -> None:
        """`garbage_collect_cached_blocks`: above the threshold, free old unsplit large segments."""
        assert self._allowed is not None and self.config.garbage_collection_threshold
        threshold = int(self.config.garbage_collection_threshold * self._allowed)
        reserved = self.stats.reserved_bytes[0].current
        if reserved <= threshold:
            return
        target = reserved - threshold
        pool = self._large
        ages = [pool.gc_calls - b.gc_base for b in pool.ordered() if not b.is_split]
        total_age, freeable = sum(ages), len(ages)
        if not freeable:
            return
        reclaimed, freed = 0, True
        while reclaimed < target and freed and freeable > 0:
            age_threshold = total_age / freeable
            freed = False
            for block in pool.ordered():
                age = pool.gc_calls - block.gc_base
                if not block.is_split and block.segment is None and age >= age_threshold:
                    freed = True
                    reclaimed += block.size
                    total_age -= age
                    freeable -= 1
                    self._release_block(block)

    def _out_of_memory(self, requested: int, size: int, alloc_size: int, stream: int,
                       allowed: int | None = None) -> OutOfMemoryError:
        self.trace("oom", self.device.mem_get_info()[0], size, stream)
        return super()._out_of_memory(requested, size, alloc_size, stream, self._allowed)

    # state

    def state(self) -> PoolState:
        """Segments in address order (each mapped range of an expandable segment is one), and metrics."""
        self._settle()
        blocks = [*self._active, *self._small.all_free(), *self._large.all_free()]
        heads = sorted((b for b in blocks if b.prev is None or not b.prev.mapped), key=lambda b: b.address)
        bins = BinCounter()
        segments = []
        largest = cached = 0
        for head in heads:
            views = []
            block: Block | None = head
            while block is not None and block.mapped:
                if block.allocated:
                    views.append(BlockView(block.address, block.size, "allocated", block.requested_size, block.tag))
                    bins.add(block.size, True)
                elif block.event_count or block.stream_uses:
                    views.append(BlockView(block.address, block.size, "awaiting_free", block.requested_size))
                    bins.add(block.size, True)
                else:
                    views.append(BlockView(block.address, block.size, "cached"))
                    bins.add(block.size, False)
                    cached += block.size
                    largest = max(largest, block.size)
                block = block.next
            segments.append(
                SegmentView(
                    address=head.address,
                    size=sum(v.size for v in views),
                    kind=head.pool.name,
                    stream=head.stream,
                    expandable=head.segment is not None,
                    blocks=tuple(views),
                )
            )
        return self._summary(tuple(segments), bins, largest, cached)


def _expandable_size(block: Block) -> int:
    """A cached block's size plus the unmapped range right behind it (what it could grow to)."""
    following = block.next
    return block.size + (following.size if following is not None and not following.mapped else 0)
