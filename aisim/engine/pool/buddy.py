"""A binary buddy allocator over an arena reserved once from the device.

Every block is a power of two between `min_block` and the largest top block. The arena (the pool's
share of the device, rounded down to `min_block`) is cut into top blocks by its binary
decomposition, largest first, so nearly all memory is usable although only power-of-two blocks
exist; the largest block is the largest power of two that fits. A request takes the lowest-addressed
free block of the smallest order that fits and splits it in halves down to the request's order,
caching the upper halves; a free merges with its buddy (address XOR size within the top block)
while the buddy is free. Internal fragmentation is the price: up to 50 % of a block, about 25 % for
sizes spread evenly over an octave (2 ln 2 - 1 of the request for sizes uniform in an octave).

`reserved_bytes` is the whole arena from the start (it is never returned), so usage and thresholds
are read from `allocated_bytes`; `inactive_split_bytes` counts the free bytes of top blocks that are
partly in use, the analogue of PyTorch's memory `empty_cache()` could not return.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from heapq import heapify, heappop, heappush

from .base import Allocation, Allocator
from .device import SimulatedDevice
from .state import (
    BinCounter,
    BlockStateName,
    BlockView,
    PoolState,
    SegmentView,
)
from .stats import decrease, increase


class BuddyAllocator(Allocator):
    """Power-of-two blocks from `min_block` up, split in halves and merged with their buddy."""

    kind = "buddy"

    def __init__(
        self,
        device: SimulatedDevice,
        min_block: int = 512,
        *,
        warning: float = 0.85,
        critical: float = 0.92,
        clock: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(device, warning=warning, critical=critical, clock=clock)
        if min_block <= 0 or min_block & (min_block - 1):
            raise ValueError("min_block must be a power of two")
        self.min_block = min_block
        arena = (device.capacity - device.outside) // min_block * min_block
        if arena <= 0:
            raise ValueError("no memory left for the buddy arena")
        base = device.malloc(arena)
        assert base is not None
        self.arena = arena
        self.base = base
        self._tops: list[tuple[int, int]] = []
        """(address, size) of the top blocks, in address order."""
        address = base
        for bit in reversed(range(arena.bit_length())):
            if arena >> bit & 1:
                self._tops.append((address, 1 << bit))
                address += 1 << bit
        self._top_bases = [address for address, _ in self._tops]
        self._top_free = [[size, 1] for _, size in self._tops]
        """Per top block: free bytes and number of free blocks."""
        self.max_order = self._tops[0][1].bit_length() - 1
        self._free: list[set[int]] = [set() for _ in range(self.max_order + 1)]
        self._heaps: list[list[int]] = [[] for _ in range(self.max_order + 1)]
        self._mask = 0
        """Bit k set when some free block of order k (2**k bytes) exists."""
        for address, size in self._tops:
            self._push(size.bit_length() - 1, address)
        self._active: dict[int, Allocation] = {}
        stats = self.stats
        increase(stats.segment, 0, len(self._tops))
        increase(stats.reserved_bytes, 0, arena)
        stats.num_device_alloc += 1

    def _push(self, order: int, address: int) -> None:
        self._free[order].add(address)
        heappush(self._heaps[order], address)
        self._mask |= 1 << order

    def _pop_lowest(self, order: int) -> int:
        free, heap = self._free[order], self._heaps[order]
        while True:
            address = heappop(heap)
            if address in free:
                free.discard(address)
                if not free:
                    self._mask &= ~(1 << order)
                    heap.clear()
                return address

    def _discard(self, order: int, address: int) -> None:
        free = self._free[order]
        free.discard(address)
        if not free:
            self._mask &= ~(1 << order)
            self._heaps[order].clear()
        elif len(self._heaps[order]) > 2 * len(free) + 64:
            heap = self._heaps[order] = list(free)
            heapify(heap)

    def _top(self, address: int) -> int:
        return bisect_right(self._top_bases, address) - 1

    def top_block(self, address: int) -> tuple[int, int]:
        """(address, size) of the top block that contains `address`."""
        return self._tops[self._top(address)]

    def _split_stats(self, top: int, free_bytes: int, free_blocks: int) -> None:
        """Move top block `top` to new free totals, keeping `inactive_split*` in step."""
        entry = self._top_free[top]
        whole = self._tops[top][1]
        old_bytes, old_blocks = (entry[0], entry[1]) if entry[0] < whole else (0, 0)
        new_bytes, new_blocks = (free_bytes, free_blocks) if free_bytes < whole else (0, 0)
        entry[0], entry[1] = free_bytes, free_blocks
        stats = self.stats
        if new_bytes != old_bytes:
            (increase if new_bytes > old_bytes else decrease)(stats.inactive_split_bytes, 0, abs(new_bytes - old_bytes))
        if new_blocks != old_blocks:
            (increase if new_blocks > old_blocks else decrease)(stats.inactive_split, 0, abs(new_blocks - old_blocks))

    def block_size(self, size: int) -> int:
        """The block a request of `size` bytes gets: the next power of two, at least `min_block`."""
        return max(self.min_block, 1 << (size - 1).bit_length())

    def malloc(self, size: int, stream: int = 0) -> Allocation:
        if size <= 0:
            if size == 0:
                return self._null(stream)
            raise ValueError("size must not be negative")
        self.ops += 1
        if self._pending:
            self.process_events()
        need = self.block_size(size)
        order = need.bit_length() - 1
        available = self._mask >> order
        if not available and self._pending:
            self.stats.num_alloc_retries += 1
            self.synchronize()
            available = self._mask >> order
        if not available:
            raise self._out_of_memory(size, need, need, stream)
        have = order + (available & -available).bit_length() - 1
        address = self._pop_lowest(have)
        for k in range(have - 1, order - 1, -1):
            self._push(k, address + (1 << k))
        top = self._top(address)
        entry = self._top_free[top]
        self._split_stats(top, entry[0] - need, entry[1] + have - order - 1)
        block = Allocation(address, need, size, stream)
        block.allocated = True
        self._active[address] = block
        stats = self.stats
        increase(stats.allocation, 0, 1)
        increase(stats.allocated_bytes, 0, need)
        increase(stats.active, 0, 1)
        increase(stats.active_bytes, 0, need)
        increase(stats.requested_bytes, 0, size)
        self._check_level()
        return block

    def _free_requested(self, block: Allocation) -> None:
        decrease(self.stats.allocation, 0, 1)
        decrease(self.stats.allocated_bytes, 0, block.size)

    def _free_block(self, block: Allocation) -> None:
        address, size = block.address, block.size
        del self._active[address]
        top = self._top(address)
        top_base, top_size = self._tops[top]
        order = size.bit_length() - 1
        merges = 0
        while size < top_size:
            buddy = top_base + ((address - top_base) ^ size)
            if buddy not in self._free[order]:
                break
            self._discard(order, buddy)
            merges += 1
            address = min(address, buddy)
            size <<= 1
            order += 1
        self._push(order, address)
        entry = self._top_free[top]
        self._split_stats(top, entry[0] + block.size, entry[1] + 1 - merges)
        stats = self.stats
        decrease(stats.active, 0, 1)
        decrease(stats.active_bytes, 0, block.size)
        decrease(stats.requested_bytes, 0, block.requested_size)

    def empty_cache(self) -> None:
        """Only waits for pending stream uses: the arena is never returned."""
        self.synchronize()

    def free_blocks(self) -> list[tuple[int, int]]:
        """Every free block as (address, size), in address order."""
        return sorted((a, 1 << k) for k, free in enumerate(self._free) for a in free)

    def state(self) -> PoolState:
        entries: list[tuple[int, int, Allocation | None]] = [(a, s, None) for a, s in self.free_blocks()]
        entries += [(b.address, b.size, b) for b in self._active.values()]
        entries.sort(key=lambda e: e[0])
        bins = BinCounter()
        per_top: list[list[BlockView]] = [[] for _ in self._tops]
        largest = cached = 0
        for address, size, block in entries:
            if block is None:
                view = BlockView(address, size, "cached")
                cached += size
                largest = max(largest, size)
            else:
                state: BlockStateName = "allocated" if block.allocated else "awaiting_free"
                view = BlockView(address, size, state, block.requested_size, block.tag)
            bins.add(size, block is not None)
            per_top[self._top(address)].append(view)
        segments = tuple(
            SegmentView(address, size, "arena", 0, False, tuple(views))
            for (address, size), views in zip(self._tops, per_top, strict=True)
        )
        return self._summary(segments, bins, largest, cached, reserved=self.arena)
