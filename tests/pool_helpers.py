"""Shared checks for the allocator tests: invariants every pool must keep, read from its public state."""

from __future__ import annotations

from itertools import pairwise

from aisim.engine.pool import Allocation, Allocator, PoolState

KiB = 1024
MiB = 1024 * 1024
GiB = 1024 * MiB


def assert_consistent(pool: Allocator, live: list[Allocation]) -> PoolState:
    """Blocks tile their segments and never overlap; the statistics agree with the live handles."""
    state = pool.state()
    stats = pool.memory_stats()
    spans = []
    for segment in state.segments:
        address = segment.address
        for block in segment.blocks:
            assert block.address == address, "blocks must tile their segment"
            address += block.size
        assert address == segment.address + segment.size
        spans.append((segment.address, segment.address + segment.size))
    spans.sort()
    for (_, end), (start, _) in pairwise(spans):
        assert end <= start, "segments overlap"
    handed_out = sorted((b.address, b.address + b.size) for b in live)
    for (_, end), (start, _) in pairwise(handed_out):
        assert end <= start, "allocations overlap"
    allocated = [b for s in state.segments for b in s.blocks if b.state == "allocated"]
    assert sorted((b.address, b.size) for b in allocated) == sorted((b.address, b.size) for b in live)
    assert stats["allocated_bytes.all.current"] == sum(b.size for b in live) == state.allocated
    awaiting = [b for s in state.segments for b in s.blocks if b.state == "awaiting_free"]
    requested = sum(b.requested_size for b in live) + sum(b.requested for b in awaiting)
    assert stats["requested_bytes.all.current"] == requested
    assert stats["allocation.all.current"] == len(live)
    assert stats["active.all.current"] == len(live) + len(awaiting)
    assert stats["active_bytes.all.current"] == state.active == state.allocated + sum(b.size for b in awaiting)
    assert stats["reserved_bytes.all.current"] == state.reserved
    for key, value in stats.items():
        if key.endswith(".current"):
            stem = key[: -len(".current")]
            assert value >= 0, key
            assert stats[stem + ".peak"] >= value, key
            assert stats[stem + ".allocated"] - stats[stem + ".freed"] == value, key
    return state
