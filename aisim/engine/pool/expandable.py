"""`expandable_segments:True`: one growing segment per (pool, stream), mapped page by page.

Source: "Note [Expandable Segments]" and `find_expandable_block`, `map_block`,
`try_allocate_expandable_block`, `unmap_block`, `release_expandable_segment` in
`c10/cuda/CUDACachingAllocator.cpp`. Each segment reserves virtual address space for
1 1/8 x the device's total memory and maps physical pages (2 MiB in the small pool, 20 MiB in the
large pool) at the lowest address where the request fits, so free space stays contiguous and merges.
On out-of-memory, `release_cached_blocks` unmaps every fully free page. Mapping a range counts as
one `num_device_alloc`, unmapping as one `num_device_free`; `segment` counts stay untouched and
`inactive_split` excludes these blocks, as in PyTorch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .blocks import Block, BlockPool, try_merge
from .device import SimulatedDevice
from .stats import decrease, increase

if TYPE_CHECKING:
    from .caching import CachingAllocator


class ExpandableSegment:
    """A reserved address range whose pages are mapped on demand."""

    __slots__ = ("base", "device", "page", "size", "stream")

    def __init__(self, device: SimulatedDevice, stream: int, page: int) -> None:
        self.device = device
        self.stream = stream
        self.page = page
        total = device.capacity
        pages = -(-(total + total // 8) // page)
        self.size = pages * page
        self.base = device.reserve_address(self.size, page)

    def map(self, address: int, size: int) -> int:
        """Map the pages covering [address, address + size); the bytes mapped, 0 when out of memory."""
        begin = (address - self.base) // self.page
        end = -(-(address + size - self.base) // self.page)
        nbytes = (end - begin) * self.page
        if nbytes == 0 or not self.device.create_pages(nbytes):
            return 0
        return nbytes

    def unmap(self, address: int, size: int) -> tuple[int, int]:
        """Unmap the whole pages inside [address, address + size): (start, bytes), bytes 0 if none."""
        begin = -(-(address - self.base) // self.page)
        end = (address + size - self.base) // self.page
        if begin >= end:
            return address, 0
        nbytes = (end - begin) * self.page
        self.device.release_pages(nbytes)
        return self.base + begin * self.page, nbytes


def _allocatable(block: Block | None) -> bool:
    return block is not None and not block.allocated and not block.event_count and not block.stream_uses


def find_expandable_block(alloc: CachingAllocator, pool: BlockPool, stream: int, size: int) -> Block:
    """The lowest-addressed run of free and unmapped blocks with room for `size`, or a new segment."""
    for unmapped in list(pool.unmapped.get(stream, ())):
        # The lowest unmapped range, or the free block right before it, starts the run.
        candidate = unmapped.prev if unmapped.prev is not None and _allocatable(unmapped.prev) else unmapped
        room = 0
        block: Block | None = candidate
        while room < size and block is not None and _allocatable(block):
            room += block.size
            block = block.next
        if room >= size:
            return candidate
    page = alloc.small_page if pool.small else alloc.large_page
    segment = ExpandableSegment(alloc.device, stream, page)
    block = Block(segment.base, segment.size, stream, pool)
    block.mapped = False
    block.segment = segment
    pool.insert_unmapped(block)
    return block


def map_block(alloc: CachingAllocator, to_map: Block, size: int) -> bool:
    """Back the front of unmapped `to_map` with pages and cache it, merged with free neighbours."""
    segment = to_map.segment
    assert segment is not None and not to_map.mapped
    mapped = segment.map(to_map.address, size)
    if not mapped:
        return False
    pool = to_map.pool
    pool.remove_unmapped(to_map)
    to_map.mapped = True
    if mapped < to_map.size:
        rest = Block(to_map.address + mapped, to_map.size - mapped, to_map.stream, pool)
        rest.mapped = False
        rest.segment = segment
        rest.splice(to_map, to_map.next)
        pool.insert_unmapped(rest)
        to_map.size = mapped
    address = to_map.address
    try_merge(to_map, to_map.prev)
    try_merge(to_map, to_map.next)
    pool.insert(to_map)
    increase(alloc.stats.reserved_bytes, pool.index, mapped)
    alloc.stats.num_device_alloc += 1
    alloc.trace("segment_map", address, mapped, to_map.stream)
    return True


def try_allocate_expandable_block(alloc: CachingAllocator, pool: BlockPool, stream: int, size: int) -> Block | None:
    """Map pages until a free block of `size` bytes exists; the block, taken out of the cache."""
    candidate = find_expandable_block(alloc, pool, stream, size)
    if not candidate.mapped and not map_block(alloc, candidate, min(candidate.size, size)):
        return None
    while candidate.size < size:
        following = candidate.next
        assert following is not None
        if not map_block(alloc, following, min(size - candidate.size, following.size)):
            return None
        candidate = following
    pool.remove(candidate)
    return candidate


def unmap_block(alloc: CachingAllocator, block: Block) -> None:
    """Give the whole free pages of cached `block` back; the partial pages at its ends stay cached."""
    segment = block.segment
    assert segment is not None
    start, nbytes = segment.unmap(block.address, block.size)
    if not nbytes:
        return
    pool = block.pool
    pool.remove(block)
    before = start - block.address
    if before > 0:
        head = Block(block.address, before, block.stream, pool)
        head.segment = segment
        head.splice(block.prev, block)
        pool.insert(head)
    after = block.size - before - nbytes
    if after > 0:
        tail = Block(start + nbytes, after, block.stream, pool)
        tail.segment = segment
        tail.splice(block, block.next)
        pool.insert(tail)
    block.address = start
    block.size = nbytes
    block.mapped = False
    try_merge(block, block.prev)
    try_merge(block, block.next)
    pool.insert_unmapped(block)
    decrease(alloc.stats.reserved_bytes, pool.index, nbytes)
    alloc.stats.num_device_free += 1
    alloc.trace("segment_unmap", start, nbytes, block.stream)


def release_expandable_segment(alloc: CachingAllocator, block: Block) -> None:
    """Drop a segment whose whole range is unmapped, returning its address space."""
    segment = block.segment
    assert segment is not None and not block.mapped and block.size == segment.size
    block.pool.remove_unmapped(block)
    alloc.device.free_address(segment.base, segment.size)
