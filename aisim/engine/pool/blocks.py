"""The caching allocator's blocks and block pools (PyTorch's `Block` and `BlockPool`).

A segment (one `cudaMalloc`, or one expandable segment's address range) is a doubly linked list of
blocks in address order that tile it exactly. Free, mapped blocks sit in their pool's `FreeIndex`
for their stream; unmapped ranges of expandable segments sit in `unmapped`, in address order.
Blocks merge only with neighbours in the same list, so never across segments; that is where the
caching allocator's fragmentation comes from.
"""

from __future__ import annotations

from bisect import insort
from typing import TYPE_CHECKING

from .base import Allocation
from .freelist import FreeIndex
from .stats import LARGE, SMALL

if TYPE_CHECKING:
    from .expandable import ExpandableSegment


class Block(Allocation):
    """A piece of a segment: allocated, awaiting free, cached, or (expandable) unmapped."""

    __slots__ = ("gc_base", "mapped", "next", "pool", "prev", "segment")

    def __init__(self, address: int, size: int, stream: int, pool: BlockPool) -> None:
        # Allocation.__init__(address, size, 0, stream), inlined: the caching allocator makes one per split
        self.address = address
        self.size = size
        self.requested_size = 0
        self.stream = stream
        self.allocated = False
        self.event_count = 0
        self.stream_uses: set[int] | None = None
        self.tag = ""
        self.pool = pool
        self.prev: Block | None = None
        self.next: Block | None = None
        self.mapped = True
        """False for the unmapped address space of an expandable segment."""
        self.segment: ExpandableSegment | None = None
        """The expandable segment this block lies in; None for an ordinary `cudaMalloc` segment."""
        self.gc_base = 0
        """The pool's search count when the block was cached (its age for garbage collection)."""

    @property
    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def splice(self, before: Block | None, after: Block | None) -> None:
        """Insert this block between `before` and `after` (neighbours in one segment)."""
        if before is not None:
            before.next = self
        self.prev = before
        if after is not None:
            after.prev = self
        self.next = after


class BlockPool:
    """The small or the large pool: free blocks per stream, ordered by (size, address)."""

    __slots__ = ("free", "gc_calls", "index", "small", "unmapped")

    def __init__(self, small: bool) -> None:
        self.small = small
        self.index = SMALL if small else LARGE
        """Which stat array entry this pool updates."""
        self.free: dict[int, FreeIndex[Block]] = {}
        self.unmapped: dict[int, list[Block]] = {}
        self.gc_calls = 0
        """`get_free_blocks_call_count`: searches so far, counted only when garbage collection is on."""

    @property
    def name(self) -> str:
        return "small" if self.small else "large"

    def insert(self, block: Block) -> None:
        """`insert_into_blocks`: cache a free block, stamping its age."""
        block.gc_base = self.gc_calls
        index = self.free.get(block.stream)
        if index is None:
            index = self.free[block.stream] = FreeIndex()
        index.insert(block)

    def remove(self, block: Block) -> None:
        self.free[block.stream].remove(block)

    def ordered(self) -> list[Block]:
        """Every cached block in PyTorch's set order: (stream, size, address)."""
        return [block for stream in sorted(self.free) for block in self.free[stream].ordered()]

    def all_free(self) -> list[Block]:
        return [block for index in self.free.values() for block in index.blocks.values()]

    def insert_unmapped(self, block: Block) -> None:
        insort(self.unmapped.setdefault(block.stream, []), block, key=lambda b: b.address)

    def remove_unmapped(self, block: Block) -> None:
        self.unmapped[block.stream].remove(block)


def try_merge(dst: Block, src: Block | None) -> int:
    """`try_merge_blocks`: absorb neighbour `src` into `dst` when it is free and equally mapped.

    Returns the bytes absorbed (0 when no merge). `dst` must not be in an index (its key changes).
    """
    if src is None or src.allocated or src.event_count or src.stream_uses or dst.mapped != src.mapped:
        return 0
    if dst.prev is src:
        dst.address = src.address
        dst.prev = src.prev
        if dst.prev is not None:
            dst.prev.next = dst
    else:
        dst.next = src.next
        if dst.next is not None:
            dst.next.prev = dst
    dst.size += src.size
    if src.mapped:
        src.pool.remove(src)
    else:
        src.pool.remove_unmapped(src)
    return src.size
