"""A step's round trip through the caching allocator, worked out without touching the pool.

A vLLM step allocates its activations (`Shape`: tags and sizes, in order) and frees them, in the same order,
when it ends. From the allocator's plain state (`CachingAllocator.can_defer`: no stream uses pending, no
history, no garbage collection, no expandable segments), a round trip served from cached blocks leaves the
blocks as they were: every piece it splits off merges back on its free, since no two free blocks of the pool
are ever neighbours. Only counters change. `round_trip` follows PyTorch's rules for each malloc and free (best
fit by (size, address) with the oversize rules, the split rule, the merge on free, and the stat updates of
`alloc_found_block`, `free_requested` and `free_block`) on private pieces of the blocks it takes, and returns
the counter changes as a `Trip` for `deferred.py` to apply. It returns None, and the real allocator runs,
when the trip would need a segment from the device, move the pool to another usage level (a threshold event)
or meet a free neighbour it cannot account for.

Why: a step of more than 512 tokens runs eagerly and allocates four activations whose sizes follow its token
count, so its shape rarely repeats and no trip of an earlier step serves it. Working the trip out costs 13 us
against 21 us for allocating and freeing the four blocks (steady state of `scenarios/azure-conv.yaml`, 14,000
shapes), and a deferred step also skips the bookkeeping around the real allocations; `aisim run` of azure-conv
costs about 7 % less CPU for it (`bench/run_speed.py --against`). `tests/test_pool_round_trip.py` checks it
against the allocator itself, counter for counter, from random pool states.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING

from .rounding import SMALL_SIZE

if TYPE_CHECKING:
    from .blocks import Block, BlockPool
    from .caching import CachingAllocator
    from .stats import Stat

Shape = tuple[tuple[str, int], ...]
"""A step's tensors, (tag, bytes) in allocation order: what a trip is worked out for."""


class Trip:
    """What one round trip of a shape does to the pool's counters, from its base."""

    __slots__ = ("changes", "ops")

    def __init__(self, changes: list[tuple[Stat, int, int, int]], ops: int) -> None:
        self.changes = changes
        """(stat, lifetime increases, lifetime decreases, the highest value it took when that raised its
        peak, else -1), for the stats the trip changes."""
        self.ops = ops

    def apply(self, pool: CachingAllocator) -> None:
        """The trip happened: its operations count now, its totals and peaks when read (`DeviceStats.owe`)."""
        pool.stats.owe(self)
        pool.ops += self.ops
        pool.version += 1

    def settle(self, times: int) -> None:
        """Add `times` trips' changes to the lifetime totals and peaks."""
        for stat, allocated, freed, reach in self.changes:
            stat.allocated += allocated * times
            stat.freed += freed * times
            if reach > stat.peak:  # noqa: PLR1730
                stat.peak = reach


class _Piece:
    """A block as the trip sees it: a base block it took, or a piece it split off one."""

    __slots__ = ("address", "allocated", "next", "pool", "prev", "size")

    def __init__(self, address: int, size: int, pool: BlockPool, prev: _Piece | None, next_: _Piece | None) -> None:
        self.address = address
        self.size = size
        self.pool = pool
        self.prev = prev
        self.next = next_
        self.allocated = False


_EDGE = _Piece(0, 0, None, None, None)  # type: ignore[arg-type]
"""A neighbour outside the trip (a real block that is allocated): it splits a segment but never merges."""
_EDGE.allocated = True


class _Split:
    """The trip's changes to `inactive_split` and `inactive_split_bytes`, which go up and down in both halves of
    the trip (so their peaks are followed step by step), per stat array index (0: all, then the pools): for each,
    [current, peak, increases, decreases], all relative to the base."""

    __slots__ = ("count", "nbytes")

    def __init__(self) -> None:
        self.count = [[0, 0, 0, 0] for _ in range(3)]
        self.nbytes = [[0, 0, 0, 0] for _ in range(3)]

    def move(self, pi: int, count: int, nbytes: int) -> None:
        """Change both stats by `count` and `nbytes` in the totals and in pool `pi` (inlined: 8 calls a trip)."""
        for entries, amount in ((self.count, count), (self.nbytes, nbytes)):
            if amount > 0:
                for entry in (entries[0], entries[pi]):
                    entry[0] += amount
                    entry[2] += amount
                    if entry[0] > entry[1]:  # noqa: PLR1730 (hot path)
                        entry[1] = entry[0]
            elif amount < 0:
                for entry in (entries[0], entries[pi]):
                    entry[0] += amount
                    entry[3] -= amount


def _outside(block: Block | None) -> _Piece | None:
    """A base block's neighbour as the trip sees it; raises `_Unaccounted` for a free one (never there in the
    plain state, where frees merge at once)."""
    if block is None:
        return None
    if block.allocated or block.event_count or block.stream_uses or not block.mapped:
        return _EDGE
    raise _Unaccounted


class _Unaccounted(Exception):
    """The trip meets what it does not model: the real allocator must run."""


def round_trip(pool: CachingAllocator, shape: Shape) -> Trip | None:
    """The counter changes of allocating `shape` on stream 0 and freeing it again in the same order, from the
    pool's present state; None when the real allocator must run instead (see the module docstring)."""
    try:
        return _trip(pool, shape)
    except _Unaccounted:
        return None


def _trip(pool: CachingAllocator, shape: Shape) -> Trip | None:
    stats = pool.stats
    max_split = pool._max_split
    taken: set[int] = set()
    """Addresses of the base blocks the trip took."""
    spare: list[_Piece] = []
    """Free pieces the trip split off (candidates for its later mallocs)."""
    pieces: list[_Piece] = []
    blocks, block_bytes, requested_bytes = [0, 0, 0], [0, 0, 0], [0, 0, 0]
    """Per stat array index: what the mallocs add to `allocation` / `active`, to `allocated_bytes` /
    `active_bytes` and to `requested_bytes` (the frees take exactly that away again)."""
    oversize = 0
    split = _Split()
    level = pool.level_of(stats.allocated_bytes[0].current)
    if level != pool.watch.level:
        return None
    for _, requested in shape:
        if requested <= 0:
            return None
        size = pool.rounded(requested)
        block_pool = pool._small if size <= SMALL_SIZE else pool._large
        found = _best_fit(block_pool, size, taken, spare)
        if found is None or pool.refuses(size, found.size):
            return None
        remaining = found.size - size
        pi = block_pool.index
        already_split = found.prev is not None or found.next is not None
        if pool.splits(block_pool, size, remaining):
            rest = _Piece(found.address + size, remaining, block_pool, found, found.next)
            if found.next is not None and found.next is not _EDGE:
                found.next.prev = rest
            found.next = rest
            found.size = size
            spare.append(rest)
            if already_split:
                split.move(pi, 0, -size)
            else:
                split.move(pi, 1, remaining)
        elif already_split:
            split.move(pi, -1, -found.size)
        found.allocated = True
        pieces.append(found)
        for index in (0, pi):
            blocks[index] += 1
            block_bytes[index] += found.size
            requested_bytes[index] += requested
        if found.size >= max_split:
            oversize += 1
    if pool.level_of(stats.allocated_bytes[0].current + block_bytes[0]) != level:
        return None
    for piece in pieces:
        _free(piece, split)
    changes: list[tuple[Stat, int, int, int]] = []
    for index in range(3):
        if not blocks[index]:  # no block of this pool: nothing of it changed
            continue
        for array, amount in ((stats.allocation, blocks[index]), (stats.active, blocks[index]),
                              (stats.allocated_bytes, block_bytes[index]), (stats.active_bytes, block_bytes[index]),
                              (stats.requested_bytes, requested_bytes[index])):
            stat = array[index]
            reach = stat.current + amount  # the mallocs raise it by `amount`, the frees lower it as much
            changes.append((stat, amount, amount, reach if reach > stat.peak else -1))
        for array, entries in ((stats.inactive_split, split.count), (stats.inactive_split_bytes, split.nbytes)):
            current, peak, up, down = entries[index]
            if current:  # not back where it started: not a round trip after all
                return None
            if up or down:
                stat = array[index]
                changes.append((stat, up, down, stat.current + peak if stat.current + peak > stat.peak else -1))
    if oversize:
        stat = stats.oversize_allocations
        changes.append((stat, oversize, oversize, stat.current + oversize if stat.current + oversize > stat.peak else -1))
    return Trip(changes, 2 * len(shape))


def _best_fit(block_pool: BlockPool, size: int, taken: set[int], spare: list[_Piece]) -> _Piece | None:
    """`get_free_block`'s lower bound of (size, address) among the pool's cached blocks the trip has not taken
    and the free pieces it split off; the chosen one leaves the candidates."""
    best: Block | None = None
    index = block_pool.free.get(0)
    if index is not None:
        sizes = index.sizes
        for position in range(bisect_left(sizes, size), len(sizes)):
            for address in index.buckets[sizes[position]]:
                if address not in taken:
                    best = index.blocks[address]
                    break
            if best is not None:
                break
    own: _Piece | None = None
    for piece in spare:
        if piece.pool is block_pool and piece.size >= size and (
                own is None or (piece.size, piece.address) < (own.size, own.address)):
            own = piece
    if own is not None and (best is None or (own.size, own.address) < (best.size, best.address)):
        spare.remove(own)
        return own
    if best is None:
        return None
    taken.add(best.address)
    return _Piece(best.address, best.size, block_pool, _outside(best.prev), _outside(best.next))


def _free(piece: _Piece, split: _Split) -> None:
    """`free_block` of one of the trip's pieces: merge with free neighbours, recount the split blocks (the rest of
    a free undoes its malloc, see `_trip`)."""
    piece.allocated = False
    count = nbytes = 0
    before = piece.prev
    if before is not None and not before.allocated:
        count -= 1
        nbytes -= before.size
        piece.address = before.address
        piece.size += before.size
        piece.prev = before.prev
        if piece.prev is not None and piece.prev is not _EDGE:
            piece.prev.next = piece
    after = piece.next
    if after is not None and not after.allocated:
        count -= 1
        nbytes -= after.size
        piece.size += after.size
        piece.next = after.next
        if piece.next is not None and piece.next is not _EDGE:
            piece.next.prev = piece
    if piece.prev is not None or piece.next is not None:
        count += 1
        nbytes += piece.size
    split.move(piece.pool.index, count, nbytes)
