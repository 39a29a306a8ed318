"""The buddy and slab allocators: their rules, stated in their module docstrings, on small arenas."""

from __future__ import annotations

import pytest

from aisim.engine.pool import (
    BuddyAllocator,
    OutOfMemoryError,
    SimulatedDevice,
    SlabAllocator,
)

from .pool_helpers import KiB, MiB, assert_consistent


def buddy(capacity: int = MiB, min_block: int = 4 * KiB) -> BuddyAllocator:
    return BuddyAllocator(SimulatedDevice(capacity), min_block)


def test_buddy_rounds_to_powers_of_two_and_splits_in_halves() -> None:
    pool = buddy()
    a = pool.malloc(100 * KiB)
    assert (a.size, a.address) == (128 * KiB, pool.base)
    assert pool.free_blocks() == [(pool.base + 128 * KiB, 128 * KiB), (pool.base + 256 * KiB, 256 * KiB),
                                  (pool.base + 512 * KiB, 512 * KiB)]
    b = pool.malloc(128 * KiB)
    assert b.address == pool.base + 128 * KiB  # the buddy half, lowest address first
    assert pool.malloc(1).size == 4 * KiB  # min_block
    stats = pool.memory_stats()
    assert stats["requested_bytes.all.current"] == 100 * KiB + 128 * KiB + 1
    assert stats["allocated_bytes.all.current"] == 260 * KiB
    assert stats["inactive_split_bytes.all.current"] == MiB - 260 * KiB
    assert "allocated_bytes.small_pool.current" not in stats


def test_buddy_merges_with_its_buddy_on_free() -> None:
    pool = buddy()
    blocks = [pool.malloc(256 * KiB) for _ in range(4)]
    for block in blocks:
        pool.free(block)
    assert pool.free_blocks() == [(pool.base, MiB)]
    assert pool.memory_stats()["inactive_split_bytes.all.current"] == 0


def test_buddy_covers_the_capacity_with_top_blocks_and_cannot_exceed_the_largest() -> None:
    pool = buddy(capacity=13 * MiB)
    assert [size // MiB for _, size in pool.free_blocks()] == [8, 4, 1]
    assert pool.memory_stats()["segment.all.current"] == 3
    assert pool.memory_reserved() == 13 * MiB
    with pytest.raises(OutOfMemoryError, match=r"Tried to allocate 16\.00 MiB\. GPU 0"):
        pool.malloc(9 * MiB)
    a, b = pool.malloc(4 * MiB), pool.malloc(4 * MiB)
    # The smallest order that fits comes first: the 4 MiB top block, then half of the 8 MiB one.
    assert (a.address, b.address) == (pool.base + 8 * MiB, pool.base)
    pool.free(a)
    pool.free(b)
    assert [size // MiB for _, size in pool.free_blocks()] == [8, 4, 1]  # top blocks never merge


def test_buddy_honours_memory_held_outside() -> None:
    pool = BuddyAllocator(SimulatedDevice(16 * MiB, non_pytorch=4 * MiB), 4 * KiB)
    assert [size // MiB for _, size in pool.free_blocks()] == [8, 4]
    assert pool.mem_get_info() == (0, 16 * MiB)


def test_buddy_rejects_a_min_block_that_is_not_a_power_of_two() -> None:
    with pytest.raises(ValueError, match="power of two"):
        buddy(min_block=3000)


def slab(
    classes: tuple[int, ...] = (512, 1024, 4096), slab_size: int = 8192, capacity: int = 64 * MiB
) -> SlabAllocator:
    return SlabAllocator(SimulatedDevice(capacity), classes, slab_size)


def test_slab_picks_the_smallest_class_and_fills_slabs() -> None:
    pool = slab()
    assert pool.malloc(600).size == 1024
    small = [pool.malloc(500) for _ in range(17)]  # 16 objects of 512 B per 8 KiB slab
    stats = pool.memory_stats()
    assert stats["segment.all.current"] == 3  # one 1 KiB slab, two 512 B slabs
    assert stats["reserved_bytes.all.current"] == 3 * 8192
    assert small[1].address == small[0].address + 512
    assert small[16].address not in range(small[0].address, small[0].address + 8192)
    assert stats["inactive_split_bytes.all.current"] == 7 * 1024 + 15 * 512


def test_slab_reuses_the_last_freed_object_of_the_lowest_partial_slab() -> None:
    pool = slab()
    first = [pool.malloc(512) for _ in range(16)]
    second = pool.malloc(512)  # a new slab
    addresses = [block.address for block in first]
    pool.free(first[3])
    pool.free(first[9])
    assert pool.malloc(512).address == addresses[9]  # LIFO inside the slab
    assert pool.malloc(512).address == addresses[3]
    assert pool.malloc(512).address == second.address + 512  # the first slab is full again


def test_slab_slack_and_dedicated_segments() -> None:
    pool = slab(classes=(3000,), slab_size=8192)
    pool.malloc(3000)
    [segment] = pool.state().segments
    assert [(b.size, b.state) for b in segment.blocks] == [(3000, "allocated"), (3000, "cached"), (2192, "slack")]
    big = pool.malloc(10_000)  # above the largest class: its own 2 MiB segment
    assert big.size == 2 * MiB and pool.memory_reserved() == 8192 + 2 * MiB
    pool.free(big)
    assert pool.memory_reserved() == 8192  # returned at once
    assert pool.memory_stats()["num_device_free"] == 1


def test_slab_empty_cache_returns_empty_slabs_only() -> None:
    pool = slab()
    keep = pool.malloc(512)
    for block in [pool.malloc(1024) for _ in range(3)]:
        pool.free(block)
    assert pool.memory_reserved() == 2 * 8192
    pool.empty_cache()
    assert pool.memory_reserved() == 8192
    assert_consistent(pool, [keep])


def test_slab_releases_empty_slabs_and_retries_before_oom() -> None:
    pool = slab(classes=(512, 4096), slab_size=MiB, capacity=3 * MiB)
    held = [pool.malloc(4096) for _ in range(3 * 256)]  # three 1 MiB slabs of 4 KiB objects
    for block in held[256:]:
        pool.free(block)  # two slabs become empty, still cached
    pool.malloc(512)  # needs a new slab: the device is full until the empty ones go back
    stats = pool.memory_stats()
    assert stats["num_alloc_retries"] == 1 and stats["num_device_free"] == 2
    assert pool.memory_reserved() == 2 * MiB
    with pytest.raises(OutOfMemoryError, match="Tried to allocate 2.00 MiB"):
        pool.malloc(2 * MiB)


def test_slab_rejects_bad_classes() -> None:
    with pytest.raises(ValueError, match="ascending"):
        slab(classes=(1024, 512))
    with pytest.raises(ValueError, match="fit in one slab"):
        slab(classes=(512, 16384))
