"""vLLM's free block queue (`FreeKVCacheBlockQueue`) as a list with a moving head.

The KV cache takes blocks off the front, puts freed cached blocks at the back and freed uncached ones
at the front, and, for a prefix-cache hit on a free cached block, takes that block out of the middle.
A doubly linked list does all four in O(1) but costs a Python step (or an OrderedDict operation, about
0.7 µs) per block, and a long trace moves millions of blocks. Here the queue is a Python list read from
`head`: taking k blocks is one slice, putting blocks at the back one `extend` and at the front one slice
assignment into the room before the head, all in C. A block taken from the middle is overwritten with
a tombstone (0, vLLM's null block, never queued) and skipped by later takes; it is found by the position
recorded when it was queued (`append(..., tracked=True)`: the blocks a hit can find, those with a hash).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

TOMBSTONE = 0
"""What stands where a block was taken out of the middle (block 0 is the null block, never free)."""
SLACK = 1024
"""Room kept before the head, for blocks put at the front."""


class FreeQueue:
    """Free block ids in queue order: front first."""

    __slots__ = ("_base", "_dead", "_head", "_items", "_where", "size")

    def __init__(self, blocks: Sequence[int]) -> None:
        self._items: list[int] = [TOMBSTONE] * SLACK + list(blocks)
        self._head = SLACK
        self._base = 0
        """Position of `_items[0]` in the queue's history (positions stay put when the list is compacted)."""
        self._where: dict[int, int] = {}
        """Position of each tracked block when it was queued: stale once it is taken (`remove` checks that
        the block is still there), at most one entry per block."""
        self.size = len(self._items) - SLACK
        """Blocks in the queue (read directly: the KV cache asks at every allocation)."""
        self._dead = 0
        """Tombstones at or after the head."""

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        return (block for block in self._items[self._head:] if block != TOMBSTONE)

    def take(self, count: int) -> list[int]:
        """The first `count` blocks, removed (the caller checked that there are as many)."""
        items, head = self._items, self._head
        end = head + count
        taken = items[head:end]
        if self._dead:
            while True:
                dead = taken.count(TOMBSTONE)
                if not dead:
                    break
                self._dead -= dead
                taken = [block for block in taken if block != TOMBSTONE]
                more = end + count - len(taken)
                taken += items[end:more]
                end = more
        self._head = end
        self.size -= count
        if end > 2 * SLACK:  # compact: drop what lies before the head (a few µs per thousand blocks)
            del items[:end - SLACK]
            self._base += end - SLACK
            self._head = SLACK
        return taken

    def append(self, blocks: Sequence[int], tracked: bool = False) -> None:
        """Put `blocks` at the back, in this order; `tracked`: `remove` may be asked for them."""
        items = self._items
        if tracked:
            where, start = self._where, self._base + len(items)
            for offset, block in enumerate(blocks):
                where[block] = start + offset
        items.extend(blocks)
        self.size += len(blocks)

    def push_front(self, blocks: list[int]) -> None:
        """Put `blocks` at the front: `blocks[0]` becomes the first."""
        head, count = self._head, len(blocks)
        if head < count:  # make room before the head (positions stay: the base moves back)
            pad = SLACK + count
            self._items[0:0] = [TOMBSTONE] * pad
            self._base -= pad
            head += pad
        self._items[head - count:head] = blocks
        self._head = head - count
        self.size += count

    def remove(self, block: int) -> None:
        """Take `block` out of the queue wherever it is."""
        items = self._items
        index = self._where.pop(block, -1) - self._base
        if not self._head <= index < len(items) or items[index] != block:  # not tracked
            index = items.index(block, self._head)
        items[index] = TOMBSTONE
        self.size -= 1
        self._dead += 1
