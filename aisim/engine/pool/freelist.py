"""An ordered set of free blocks keyed by (size, address), for best-fit lookups without a tree.

PyTorch keeps free blocks in a `std::set` ordered by (stream, size, ptr) and asks for the lower bound
of (stream, size): the smallest block that fits, lowest address on ties. Here one `FreeIndex`
holds one stream's blocks of one pool (the stream component is the dictionary key above it). Sizes
live in a sorted list of distinct values, each with a sorted list of addresses, so a lookup is two
bisections and an insert or removal one `insort` / `del` in a short list: O(log n) comparisons
plus a memmove, which is what makes per-KV-block allocation affordable in pure Python.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar


class Sized(Protocol):
    address: int
    size: int


B = TypeVar("B", bound=Sized)


class FreeIndex(Generic[B]):
    """Free blocks ordered by (size, address)."""

    __slots__ = ("blocks", "buckets", "sizes")

    def __init__(self) -> None:
        self.sizes: list[int] = []
        """Distinct sizes present, ascending."""
        self.buckets: dict[int, list[int]] = {}
        """Size -> addresses of the blocks of that size, ascending."""
        self.blocks: dict[int, B] = {}
        """Address -> block."""

    def __len__(self) -> int:
        return len(self.blocks)

    def insert(self, block: B) -> None:
        size, address = block.size, block.address
        bucket = self.buckets.get(size)
        if bucket is None:
            insort(self.sizes, size)
            self.buckets[size] = [address]
        elif address > bucket[-1]:
            bucket.append(address)
        else:
            insort(bucket, address)
        self.blocks[address] = block

    def remove(self, block: B) -> None:
        size, address = block.size, block.address
        bucket = self.buckets[size]
        if len(bucket) == 1:
            del self.buckets[size]
            del self.sizes[bisect_left(self.sizes, size)]
        else:
            del bucket[bisect_left(bucket, address)]
        del self.blocks[address]

    def lower_bound(self, size: int) -> B | None:
        """The smallest block of at least `size` bytes, lowest address first; None if none."""
        sizes = self.sizes
        i = bisect_left(sizes, size)
        if i == len(sizes):
            return None
        return self.blocks[self.buckets[sizes[i]][0]]

    def iter_from(self, size: int) -> Iterator[B]:
        """Blocks of at least `size` bytes in (size, address) order."""
        for s in self.sizes[bisect_left(self.sizes, size) :]:
            for address in list(self.buckets.get(s, ())):
                yield self.blocks[address]

    def ordered(self) -> list[B]:
        """All blocks in (size, address) order."""
        return [self.blocks[a] for s in self.sizes for a in self.buckets[s]]

    def largest(self) -> B | None:
        """The largest block (lowest address among equals)."""
        if not self.sizes:
            return None
        return self.blocks[self.buckets[self.sizes[-1]][0]]
