"""A slab allocator: fixed size classes carved from equal slabs, large requests on their own segment.

Bonwick's design (USENIX 1994) in GPU clothes. A request goes to the smallest size class that holds
it; each class owns slabs of `slab_size` bytes cut into `slab_size // class` objects, the rest of
the slab being slack. An object comes from the lowest-addressed partly used slab of its class, then
from an empty one, then from a new slab (`cudaMalloc`); inside a slab, the most recently freed object
is reused first (a LIFO free list). Empty slabs stay cached until `empty_cache()` or an
out-of-memory retry returns them. A request above the largest class gets a dedicated segment
rounded up to 2 MiB, freed as soon as the request is.

There is no external fragmentation inside a class, but free objects of one class cannot serve
another: `inactive_split_bytes` counts the free objects of partly used slabs (memory
`empty_cache()` cannot return) and the slack shows in reserved minus allocated.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from heapq import heappop, heappush
from itertools import count

from .base import Allocation, Allocator
from .device import PAGE, SimulatedDevice
from .state import (
    BinCounter,
    BlockStateName,
    BlockView,
    PoolState,
    SegmentView,
)
from .stats import decrease, increase

NOWHERE, PARTIAL, EMPTY = 0, 1, 2
DEFAULT_CLASSES = tuple(1 << k for k in range(9, 21))
"""The scenario's default size classes: 512 B to 1 MiB in powers of two."""


class Slab:
    """One slab: `capacity` objects of `object_size` bytes from `address`."""

    __slots__ = (
        "address",
        "capacity",
        "free_slots",
        "klass",
        "live",
        "next_unused",
        "object_size",
        "serial",
        "size",
        "used",
        "where",
    )

    def __init__(self, address: int, size: int, klass: int, object_size: int, serial: int) -> None:
        self.address = address
        self.size = size
        self.klass = klass
        self.object_size = object_size
        self.capacity = size // object_size
        self.used = 0
        self.next_unused = 0
        """Slots from here on were never handed out (so a new slab costs O(1))."""
        self.free_slots: list[int] = []
        self.live: dict[int, SlabAllocation] = {}
        self.where = NOWHERE
        """Which heap the slab is validly listed in: PARTIAL, EMPTY or neither (full or released)."""
        self.serial = serial


class SlabAllocation(Allocation):
    """An object in a slab, or (slab None) a dedicated segment."""

    __slots__ = ("slab", "slot")

    def __init__(self, address: int, size: int, requested: int, stream: int, slab: Slab | None, slot: int) -> None:
        super().__init__(address, size, requested, stream)
        self.slab = slab
        self.slot = slot


class SlabAllocator(Allocator):
    """Size-class caches of equal slabs, plus dedicated segments for large requests."""

    kind = "slab"

    def __init__(
        self,
        device: SimulatedDevice,
        size_classes: Sequence[int] = DEFAULT_CLASSES,
        slab_size: int = 2 * 1024 * 1024,
        *,
        warning: float = 0.85,
        critical: float = 0.92,
        clock: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(device, warning=warning, critical=critical, clock=clock)
        classes = list(size_classes)
        if not classes or any(c <= 0 for c in classes) or sorted(set(classes)) != classes:
            raise ValueError("size_classes must be positive and strictly ascending")
        if classes[-1] > slab_size:
            raise ValueError("every size class must fit in one slab")
        self.size_classes = classes
        self.slab_size = slab_size
        self._partial: list[list[tuple[int, int, Slab]]] = [[] for _ in classes]
        self._empty: list[list[tuple[int, int, Slab]]] = [[] for _ in classes]
        self._slabs: dict[int, Slab] = {}
        self._dedicated: dict[int, SlabAllocation] = {}
        self._serial = count()

    # malloc

    def malloc(self, size: int, stream: int = 0) -> Allocation:
        if size <= 0:
            if size == 0:
                return self._null(stream)
            raise ValueError("size must not be negative")
        self.ops += 1
        if self._pending:
            self.process_events()
        klass = bisect_left(self.size_classes, size)
        if klass == len(self.size_classes):
            block = self._dedicated_segment(size, stream)
        else:
            slab = self._take(self._partial[klass], PARTIAL) or self._take(self._empty[klass], EMPTY)
            if slab is None:
                slab = self._new_slab(klass, size, stream)
            block = self._carve(slab, size, stream)
        stats = self.stats
        increase(stats.allocation, 0, 1)
        increase(stats.allocated_bytes, 0, block.size)
        increase(stats.active, 0, 1)
        increase(stats.active_bytes, 0, block.size)
        increase(stats.requested_bytes, 0, size)
        self._check_level()
        return block

    def _take(self, heap: list[tuple[int, int, Slab]], where: int) -> Slab | None:
        """The lowest-addressed slab validly listed in `heap` (left there; stale entries dropped)."""
        while heap:
            slab = heap[0][2]
            if slab.where == where:
                return slab
            heappop(heap)
        return None

    def _list(self, slab: Slab, where: int) -> None:
        slab.where = where
        if where != NOWHERE:
            heap = (self._partial if where == PARTIAL else self._empty)[slab.klass]
            heappush(heap, (slab.address, slab.serial, slab))
            if len(heap) > 2 * len(self._slabs) + 64:
                # Slabs cycling between full and partial leave stale entries; drop them.
                valid = {entry[1]: entry for entry in heap if entry[2].where == where}
                heap[:] = sorted(valid.values())

    def _carve(self, slab: Slab, size: int, stream: int) -> SlabAllocation:
        if slab.free_slots:
            slot = slab.free_slots.pop()
        else:
            slot = slab.next_unused
            slab.next_unused += 1
        self._set_used(slab, slab.used + 1)
        block = SlabAllocation(slab.address + slot * slab.object_size, slab.object_size, size, stream, slab, slot)
        block.allocated = True
        slab.live[slot] = block
        return block

    def _set_used(self, slab: Slab, used: int) -> None:
        """Change a slab's object count, moving it between lists and keeping `inactive_split*` in step."""
        old = slab.used
        slab.used = used
        old_free = slab.capacity - old if old else 0
        new_free = slab.capacity - used if used else 0
        if new_free != old_free:
            delta = new_free - old_free
            stats = self.stats
            if delta > 0:
                increase(stats.inactive_split, 0, delta)
                increase(stats.inactive_split_bytes, 0, delta * slab.object_size)
            else:
                decrease(stats.inactive_split, 0, -delta)
                decrease(stats.inactive_split_bytes, 0, -delta * slab.object_size)
        where = EMPTY if used == 0 else PARTIAL if used < slab.capacity else NOWHERE
        if where != slab.where:
            self._list(slab, where)

    def _device_malloc(self, nbytes: int, requested: int, stream: int) -> int:
        """A segment from the device, after returning empty slabs and waiting for streams if needed."""
        address = self.device.malloc(nbytes)
        if address is None:
            self.stats.num_alloc_retries += 1
            self.synchronize()
            self._release_empty_slabs()
            address = self.device.malloc(nbytes)
        if address is None:
            raise self._out_of_memory(requested, nbytes, nbytes, stream)
        stats = self.stats
        increase(stats.segment, 0, 1)
        increase(stats.reserved_bytes, 0, nbytes)
        stats.num_device_alloc += 1
        return address

    def _new_slab(self, klass: int, requested: int, stream: int) -> Slab:
        address = self._device_malloc(self.slab_size, requested, stream)
        slab = Slab(address, self.slab_size, klass, self.size_classes[klass], next(self._serial))
        self._slabs[address] = slab
        self._list(slab, EMPTY)
        return slab

    def _dedicated_segment(self, size: int, stream: int) -> SlabAllocation:
        nbytes = -(-size // PAGE) * PAGE
        address = self._device_malloc(nbytes, size, stream)
        block = SlabAllocation(address, nbytes, size, stream, None, 0)
        block.allocated = True
        self._dedicated[address] = block
        return block

    def _device_free(self, address: int, nbytes: int) -> None:
        self.device.free(address)
        stats = self.stats
        decrease(stats.segment, 0, 1)
        decrease(stats.reserved_bytes, 0, nbytes)
        stats.num_device_free += 1

    # free

    def _free_requested(self, block: SlabAllocation) -> None:  # type: ignore[override]
        decrease(self.stats.allocation, 0, 1)
        decrease(self.stats.allocated_bytes, 0, block.size)

    def _free_block(self, block: SlabAllocation) -> None:  # type: ignore[override]
        slab = block.slab
        if slab is None:
            del self._dedicated[block.address]
            self._device_free(block.address, block.size)
        else:
            del slab.live[block.slot]
            slab.free_slots.append(block.slot)
            self._set_used(slab, slab.used - 1)
        stats = self.stats
        decrease(stats.active, 0, 1)
        decrease(stats.active_bytes, 0, block.size)
        decrease(stats.requested_bytes, 0, block.requested_size)

    def empty_cache(self) -> None:
        """Wait for pending stream uses, then give every empty slab back to the device."""
        self.synchronize()
        self._release_empty_slabs()

    def _release_empty_slabs(self) -> None:
        for address in sorted(self._slabs):
            slab = self._slabs[address]
            if slab.used == 0:
                slab.where = NOWHERE
                del self._slabs[address]
                self._device_free(address, self.slab_size)
        for heap in self._empty:
            heap.clear()

    # state

    def state(self) -> PoolState:
        bins = BinCounter()
        segments: list[SegmentView] = []
        largest = cached = 0
        for address in sorted([*self._slabs, *self._dedicated]):
            if address in self._dedicated:
                block = self._dedicated[address]
                state: BlockStateName = "allocated" if block.allocated else "awaiting_free"
                view = BlockView(address, block.size, state, block.requested_size, block.tag)
                bins.add(block.size, True)
                segments.append(SegmentView(address, block.size, "dedicated", block.stream, False, (view,)))
                continue
            slab = self._slabs[address]
            views = _slab_blocks(slab)
            free = slab.capacity - slab.used
            if free:
                cached += free * slab.object_size
                largest = max(largest, slab.object_size)
                bins.add(slab.object_size, False, free)
            bins.add(slab.object_size, True, slab.used)
            segments.append(SegmentView(address, self.slab_size, "slab", 0, False, views))
        return self._summary(tuple(segments), bins, largest, cached)


def _slab_blocks(slab: Slab) -> tuple[BlockView, ...]:
    """A slab's objects in address order, runs of free objects merged, slack last."""
    views: list[BlockView] = []
    size = slab.object_size
    run_start = None
    for slot in range(slab.capacity):
        block = slab.live.get(slot)
        if block is None:
            if run_start is None:
                run_start = slot
            continue
        if run_start is not None:
            views.append(BlockView(slab.address + run_start * size, (slot - run_start) * size, "cached"))
            run_start = None
        state: BlockStateName = "allocated" if block.allocated else "awaiting_free"
        views.append(BlockView(block.address, size, state, block.requested_size, block.tag))
    if run_start is not None:
        views.append(BlockView(slab.address + run_start * size, (slab.capacity - run_start) * size, "cached"))
    used_end = slab.capacity * size
    if used_end < slab.size:
        views.append(BlockView(slab.address + used_end, slab.size - used_end, "slack"))
    return tuple(views)
