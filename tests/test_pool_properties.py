"""Random malloc / free / stream sequences never overlap, never leak, and undo completely."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

from hypothesis import event, given, settings
from hypothesis import strategies as st

from aisim.engine.pool import (
    Allocation,
    Allocator,
    BuddyAllocator,
    CachingAllocator,
    CachingConfig,
    OutOfMemoryError,
    SimulatedDevice,
    SlabAllocator,
)

from .pool_helpers import KiB, MiB, assert_consistent

sizes = st.one_of(st.integers(1, 64 * KiB), st.integers(1, MiB + 4096), st.integers(MiB, 24 * MiB))
mallocs = st.tuples(st.just("malloc"), sizes, st.integers(0, 2))
operations = st.lists(
    st.one_of(
        mallocs,
        mallocs,
        st.tuples(st.just("free"), st.integers(0, 10**6), st.frozensets(st.integers(0, 2), max_size=2)),
        st.tuples(st.just("done"), st.integers(0, 2), st.just(None)),
        st.tuples(st.just("empty_cache"), st.just(None), st.just(None)),
    ),
    min_size=10,
    max_size=120,
)


def run(pool: Allocator, ops: list[tuple[str, object, object]], check: Callable[[Allocator], None]) -> None:
    initial = pool.state().to_dict()
    live: list[Allocation] = []
    for op, a, b in ops:
        if op == "malloc":
            try:
                live.append(pool.malloc(a, stream=b))  # type: ignore[arg-type]
            except OutOfMemoryError:
                event("out of memory")
        elif op == "free" and live:
            pool.free(live.pop(a % len(live)), uses=b)  # type: ignore[arg-type, operator]
        elif op == "done":
            pool.stream_done(a)  # type: ignore[arg-type]
        elif op == "empty_cache":
            pool.empty_cache()
        assert_consistent(pool, live)
        check(pool)
    if pool.memory_stats()["num_alloc_retries"]:
        event("retried")
    if pool.pending_frees():
        event("frees pending at the end")
    for block in live:
        pool.free(block)
    pool.empty_cache()
    assert_consistent(pool, [])
    assert pool.pending_frees() == 0
    assert pool.state().to_dict() == initial
    stats = pool.memory_stats()
    held = ("reserved", "segment")  # the buddy arena stays reserved
    assert all(v == 0 for k, v in stats.items() if k.endswith(".current") and not k.startswith(held))


def caching_invariants(pool: Allocator) -> None:
    """Reference §1.13: no adjacent free blocks, inactive_split = free blocks of split segments, segments counted."""
    state = pool.state()
    stats = pool.memory_stats()
    split_free = 0
    ordinary = [s for s in state.segments if not s.expandable]
    for segment in ordinary:
        states = [b.state for b in segment.blocks]
        assert all(not (x == y == "cached") for x, y in pairwise(states)), "adjacent free blocks"
        if len(segment.blocks) > 1:
            split_free += sum(b.size for b in segment.blocks if b.state == "cached")
    assert stats["inactive_split_bytes.all.current"] == split_free
    assert stats["segment.all.current"] == len(ordinary)
    assert stats["reserved_bytes.all.current"] == sum(s.size for s in state.segments)
    for pool_name, kind in (("small_pool", "small"), ("large_pool", "large")):
        held = sum(s.size for s in state.segments if s.kind == kind)
        assert stats[f"reserved_bytes.{pool_name}.current"] == held


@settings(max_examples=150, deadline=None)
@given(operations, st.booleans(), st.sampled_from([None, 40 * MiB]), st.sampled_from([None, 4]))
def test_caching_allocator(ops: list, expandable: bool, max_split: int | None, divisions: int | None) -> None:
    config = CachingConfig(max_split_size=max_split, expandable_segments=expandable, roundup_power2_divisions=divisions)
    run(CachingAllocator(SimulatedDevice(48 * MiB), config), ops, caching_invariants)


def buddy_invariants(pool: Allocator) -> None:
    assert isinstance(pool, BuddyAllocator)
    state = pool.state()
    cached = [(b.address, b.size) for s in state.segments for b in s.blocks if b.state == "cached"]
    assert cached == pool.free_blocks()
    for address, size in cached:  # a free block and its buddy are never both free
        top = next(s for s in state.segments if s.address <= address < s.address + s.size)
        if size < top.size:
            assert (top.address + ((address - top.address) ^ size), size) not in cached


@settings(max_examples=150, deadline=None)
@given(operations)
def test_buddy_allocator(ops: list) -> None:
    run(BuddyAllocator(SimulatedDevice(21 * MiB), 4 * KiB), ops, buddy_invariants)


def slab_invariants(pool: Allocator) -> None:
    state = pool.state()
    stats = pool.memory_stats()
    assert stats["segment.all.current"] == len(state.segments)
    partly_used_free = sum(
        b.size
        for s in state.segments
        if s.kind == "slab" and any(b.state != "cached" and b.state != "slack" for b in s.blocks)
        for b in s.blocks
        if b.state == "cached"
    )
    assert stats["inactive_split_bytes.all.current"] == partly_used_free


@settings(max_examples=150, deadline=None)
@given(operations)
def test_slab_allocator(ops: list) -> None:
    pool = SlabAllocator(SimulatedDevice(24 * MiB), (512, 4096, 65536, MiB), 2 * MiB)
    run(pool, ops, slab_invariants)
