"""PyTorch's caching allocator against the behaviour stated in reference §1 (expected values derived there)."""

from __future__ import annotations

import pytest

from aisim.engine.pool import (
    CachingAllocator,
    CachingConfig,
    OutOfMemoryError,
    SimulatedDevice,
)

from .pool_helpers import GiB, MiB, assert_consistent


def caching(capacity: int = 80 * GiB, **config: object) -> CachingAllocator:
    return CachingAllocator(SimulatedDevice(capacity), CachingConfig(**config))  # type: ignore[arg-type]


def blocks_of(pool: CachingAllocator) -> list[list[tuple[float, str]]]:
    """Each segment's blocks as (size in MiB, state)."""
    return [[(b.size / MiB, b.state) for b in s.blocks] for s in pool.state().segments]


def test_a_3_MiB_request_splits_a_20_MiB_segment() -> None:
    pool = caching()
    block = pool.malloc(3 * MiB)
    stats = pool.memory_stats()
    assert stats["reserved_bytes.all.current"] == 20 * MiB
    assert stats["reserved_bytes.large_pool.current"] == 20 * MiB
    assert stats["allocated_bytes.all.current"] == 3 * MiB
    assert stats["inactive_split_bytes.all.current"] == 17 * MiB
    assert stats["inactive_split.all.current"] == 1
    assert stats["segment.all.current"] == 1 and stats["num_device_alloc"] == 1
    assert blocks_of(pool) == [[(3, "allocated"), (17, "cached")]]
    state = pool.state()
    assert block.address == state.segments[0].address  # the front of the segment is handed out
    assert_consistent(pool, [block])


def test_a_19_5_MiB_request_takes_a_whole_20_MiB_segment() -> None:
    pool = caching()
    block = pool.malloc(int(19.5 * MiB))
    stats = pool.memory_stats()
    assert block.size == 20 * MiB
    assert stats["allocated_bytes.all.current"] == 20 * MiB
    assert stats["requested_bytes.all.current"] == int(19.5 * MiB)
    assert stats["inactive_split_bytes.all.current"] == 0
    assert blocks_of(pool) == [[(20, "allocated")]]


def test_a_10_1_MiB_request_gets_12_MiB_with_an_inactive_split() -> None:
    pool = caching()
    request = int(10.1 * MiB)
    rounded = -(-request // 512) * 512
    pool.malloc(request)
    stats = pool.memory_stats()
    assert stats["reserved_bytes.all.current"] == 12 * MiB
    assert stats["allocated_bytes.all.current"] == rounded
    assert stats["inactive_split_bytes.all.current"] == 12 * MiB - rounded  # about 1.9 MiB


def test_small_requests_share_2_MiB_segments() -> None:
    pool = caching()
    first = pool.malloc(MiB)  # 1 MiB exactly is small
    stats = pool.memory_stats()
    assert stats["reserved_bytes.small_pool.current"] == 2 * MiB
    assert stats["inactive_split_bytes.small_pool.current"] == MiB
    quarter = [pool.malloc(512 * 1024) for _ in range(2)]
    assert pool.memory_stats()["segment.small_pool.current"] == 1
    pool.malloc(512 * 1024)  # the segment is full: a second one
    assert pool.memory_stats()["segment.small_pool.current"] == 2
    pool.malloc(MiB + 1)  # just above 1 MiB: large pool, 20 MiB segment
    assert pool.memory_stats()["reserved_bytes.large_pool.current"] == 20 * MiB
    assert first.address + MiB == quarter[0].address


def test_devlog_small_then_large_reserves_256_MiB() -> None:
    pool = caching()
    small = [pool.malloc(16 * MiB) for _ in range(8)]
    for block in small:
        pool.free(block)
    [pool.malloc(32 * MiB) for _ in range(4)]
    assert pool.memory_reserved() == 256 * MiB


def test_devlog_large_then_small_reserves_128_MiB() -> None:
    pool = caching()
    large = [pool.malloc(32 * MiB) for _ in range(4)]
    for block in large:
        pool.free(block)
    [pool.malloc(16 * MiB) for _ in range(8)]
    assert pool.memory_reserved() == 128 * MiB


def test_devlog_expandable_segments_need_no_new_pages() -> None:
    pool = caching(expandable_segments=True)
    small = [pool.malloc(16 * MiB) for _ in range(8)]
    assert pool.memory_reserved() == 140 * MiB  # 7 pages of 20 MiB
    mapped = pool.memory_stats()["num_device_alloc"]
    for block in small:
        pool.free(block)
    assert blocks_of(pool) == [[(140, "cached")]]  # everything merged into one free block
    large = [pool.malloc(32 * MiB) for _ in range(4)]
    assert pool.memory_reserved() == 140 * MiB
    assert pool.memory_stats()["num_device_alloc"] == mapped
    assert pool.memory_stats()["inactive_split_bytes.all.current"] == 0  # excluded for expandable segments
    assert_consistent(pool, large)


def test_split_and_merge_inside_one_segment() -> None:
    pool = caching()
    a, b, c = (pool.malloc(2 * MiB) for _ in range(3))
    assert blocks_of(pool) == [[(2, "allocated")] * 3 + [(14, "cached")]]
    pool.free(b)
    assert pool.memory_stats()["inactive_split.all.current"] == 2
    assert pool.memory_stats()["inactive_split_bytes.all.current"] == 16 * MiB
    pool.free(a)  # merges with b
    assert blocks_of(pool) == [[(4, "cached"), (2, "allocated"), (14, "cached")]]
    assert pool.memory_stats()["inactive_split.all.current"] == 2
    pool.free(c)  # merges both sides: the segment is one unsplit free block again
    assert blocks_of(pool) == [[(20, "cached")]]
    stats = pool.memory_stats()
    assert stats["inactive_split.all.current"] == 0 and stats["inactive_split_bytes.all.current"] == 0
    pool.empty_cache()
    stats = pool.memory_stats()
    assert stats["reserved_bytes.all.current"] == 0 and stats["num_device_free"] == 1
    assert pool.state().segments == ()


def test_blocks_never_merge_across_segments() -> None:
    pool = caching()
    first, second = pool.malloc(12 * MiB), pool.malloc(12 * MiB)
    pool.free(first)
    pool.free(second)
    assert blocks_of(pool) == [[(12, "cached")], [(12, "cached")]]
    pool.malloc(24 * MiB)
    assert pool.memory_reserved() == 48 * MiB


def test_best_fit_takes_the_smallest_block_then_the_lowest_address() -> None:
    pool = caching()
    held = [pool.malloc(12 * MiB), pool.malloc(16 * MiB), pool.malloc(12 * MiB), pool.malloc(14 * MiB)]
    addresses = [block.address for block in held]
    for block in held:
        pool.free(block)
    assert pool.malloc(13 * MiB).address == addresses[3]  # 14 MiB is the best fit
    assert pool.malloc(11 * MiB).address == addresses[0]  # two 12 MiB blocks: the lower address


def test_freed_blocks_are_reused_only_on_their_stream() -> None:
    pool = caching()
    block = pool.malloc(4 * MiB, stream=0)
    address = block.address  # a handle must not be read after its free
    pool.free(block)
    other = pool.malloc(4 * MiB, stream=7)
    assert pool.memory_reserved() == 40 * MiB and other.address != address
    again = pool.malloc(4 * MiB, stream=0)
    assert again.address == address and pool.memory_reserved() == 40 * MiB


def test_max_split_size_keeps_oversize_blocks_whole() -> None:
    pool = caching(max_split_size=40 * MiB)
    assert pool.memory_stats()["max_split_size"] == 40 * MiB
    big = pool.malloc(64 * MiB)
    big_address = big.address
    stats = pool.memory_stats()
    assert stats["oversize_allocations.current"] == 1 and stats["oversize_segments.current"] == 1
    pool.free(big)
    small = pool.malloc(30 * MiB)  # below max_split_size: may not use the 64 MiB block
    assert small.address != big_address and pool.memory_reserved() == 94 * MiB
    pool.free(small)
    far = pool.malloc(40 * MiB)  # 64 >= 40 + 20: too much larger to reuse
    assert far.address != big_address
    near = pool.malloc(50 * MiB)  # 64 < 50 + 20: reused whole, not split
    assert near.address == big_address and near.size == 64 * MiB
    assert pool.memory_stats()["allocated_bytes.all.current"] == 104 * MiB


def test_default_max_split_size_reads_minus_one() -> None:
    assert caching().memory_stats()["max_split_size"] == -1


def test_large_pool_splits_only_remainders_above_1_MiB() -> None:
    pool = caching()
    whole = pool.malloc(12 * MiB)
    pool.free(whole)
    fits = pool.malloc(11 * MiB)  # remainder 1 MiB: not > 1 MiB, no split
    assert fits.size == 12 * MiB
    pool.free(fits)
    split = pool.malloc(int(10.5 * MiB))  # remainder 1.5 MiB: split
    assert split.size == int(10.5 * MiB)


def test_a_device_failure_frees_the_cache_and_retries_before_oom() -> None:
    pool = caching(capacity=100 * MiB)
    held = [pool.malloc(20 * MiB) for _ in range(3)]
    for block in held:
        pool.free(block)
    assert pool.memory_reserved() == 60 * MiB
    pool.malloc(50 * MiB)  # 40 MiB free on the device: flush the three cached segments, retry
    stats = pool.memory_stats()
    assert stats["num_alloc_retries"] == 1 and stats["num_ooms"] == 0
    assert stats["num_sync_all_streams"] == 1 and stats["num_device_free"] == 3
    assert pool.memory_reserved() == 50 * MiB


def test_oom_raises_pytorchs_message() -> None:
    pool = caching(capacity=100 * MiB)
    pool.malloc(3 * MiB)
    with pytest.raises(OutOfMemoryError) as caught:
        pool.malloc(90 * MiB)
    assert str(caught.value) == (
        "CUDA out of memory. Tried to allocate 90.00 MiB. GPU 0 has a total capacity of 100.00 MiB of which "
        "80.00 MiB is free. Including non-PyTorch memory, this process has 20.00 MiB memory in use. Of the "
        "allocated memory 3.00 MiB is allocated by PyTorch, and 17.00 MiB is reserved by PyTorch but unallocated. "
        "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "to avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
    error = caught.value
    assert isinstance(error, RuntimeError)
    assert (error.alloc_size, error.device_free) == (90 * MiB, 80 * MiB)
    assert (error.allocated, error.reserved) == (3 * MiB, 20 * MiB)
    stats = pool.memory_stats()
    assert stats["num_ooms"] == 1 and stats["num_alloc_retries"] == 1


def test_oom_message_names_other_processes_and_the_allowed_fraction() -> None:
    device = SimulatedDevice(200 * MiB, index=1, non_pytorch=10 * MiB, other_processes={4242: 30 * MiB})
    pool = CachingAllocator(device, CachingConfig(memory_fraction=0.5))
    pool.malloc(12 * MiB)
    with pytest.raises(OutOfMemoryError) as caught:
        pool.malloc(90 * MiB)  # 12 + 90 > 100 MiB allowed
    message = str(caught.value)
    assert message.startswith(
        "CUDA out of memory. Tried to allocate 90.00 MiB. GPU 1 has a total capacity of 200.00 MiB of which "
        "148.00 MiB is free. Including non-PyTorch memory, this process has 22.00 MiB memory in use. "
        "Process 4242 has 30.00 MiB memory in use. 100.00 MiB allowed; Of the allocated memory 12.00 MiB is "
        "allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated."
    )


def test_oom_message_without_nvml_has_no_process_sentence() -> None:
    pool = CachingAllocator(SimulatedDevice(40 * MiB, nvml=False))
    with pytest.raises(OutOfMemoryError, match=r"is free\. Of the allocated memory 0 bytes is allocated"):
        pool.malloc(64 * MiB)


def test_a_block_used_on_another_stream_waits_for_that_stream() -> None:
    pool = caching()
    block = pool.malloc(4 * MiB, stream=0)
    address = block.address
    pool.free(block, uses=(1,))
    stats = pool.memory_stats()
    assert stats["allocated_bytes.all.current"] == 0  # dropped at once
    assert stats["active_bytes.all.current"] == 4 * MiB  # still in use by stream 1
    assert [b.state for b in pool.state().segments[0].blocks] == ["awaiting_free", "cached"]
    assert pool.malloc(4 * MiB, stream=0).address != address  # not reusable yet
    pool.stream_done(1)
    reused = pool.malloc(4 * MiB, stream=0)  # malloc processes completed events first
    assert reused.address == address
    assert pool.pending_frees() == 0


def test_stream_done_covers_only_work_queued_before_it() -> None:
    pool = caching()
    first = pool.malloc(MiB)
    pool.stream_done(3)
    pool.free(first, uses=(3,))  # recorded after the stream finished earlier work
    pool.process_events()
    assert pool.pending_frees() == 1
    pool.record_stream(pool.malloc(MiB), 0)  # a use on its own stream is ignored
    pool.empty_cache()  # synchronizes every stream
    assert pool.pending_frees() == 0
    assert pool.memory_stats()["num_sync_all_streams"] == 1


def test_garbage_collection_frees_old_cached_segments_above_the_threshold() -> None:
    pool = caching(capacity=200 * MiB, memory_fraction=0.5, garbage_collection_threshold=0.5)
    held = [pool.malloc(20 * MiB) for _ in range(3)]
    for block in held:
        pool.free(block)
    pool.malloc(24 * MiB)  # miss: 60 MiB reserved > 50 MiB threshold, all three are as old as the mean
    stats = pool.memory_stats()
    assert pool.memory_reserved() == 24 * MiB
    assert stats["num_device_free"] == 3 and stats["num_alloc_retries"] == 0


def test_garbage_collection_threshold_needs_a_memory_fraction() -> None:
    pool = caching(capacity=200 * MiB, garbage_collection_threshold=0.5)
    held = [pool.malloc(20 * MiB) for _ in range(3)]
    for block in held:
        pool.free(block)
    pool.malloc(24 * MiB)
    assert pool.memory_reserved() == 84 * MiB


def test_expandable_segments_unmap_free_pages_on_oom() -> None:
    pool = caching(capacity=100 * MiB, expandable_segments=True)
    held = [pool.malloc(16 * MiB, stream=0) for _ in range(4)]
    assert pool.memory_reserved() == 80 * MiB
    for block in held:
        pool.free(block)
    pool.record_history()
    other = pool.malloc(60 * MiB, stream=1)  # a new segment for stream 1: stream 0's pages must go
    stats = pool.memory_stats()
    assert stats["num_alloc_retries"] == 1 and pool.memory_reserved() == 60 * MiB
    assert [entry.action for entry in pool.history or ()] == ["segment_unmap", "segment_map", "alloc"]
    assert stats["segment.all.current"] == 0  # mapped ranges are not counted as segments
    assert [s.stream for s in pool.state().segments] == [1]
    assert_consistent(pool, [other])


def test_expandable_segments_map_at_the_lowest_address() -> None:
    pool = caching(expandable_segments=True)
    a = pool.malloc(30 * MiB)
    b = pool.malloc(30 * MiB)
    assert b.address == a.address + 30 * MiB
    assert [s.expandable for s in pool.state().segments] == [True]


def test_trace_follows_pytorchs_event_sequences() -> None:
    pool = caching()
    pool.record_history()
    block = pool.malloc(3000)
    pool.free(block)
    assert [(e.action, e.size) for e in pool.history or ()] == [
        ("segment_alloc", 2 * MiB),
        ("alloc", 3000),
        ("free_requested", 3000),
        ("free_completed", 3000),
    ]
    assert len({e.addr for e in pool.history or ()}) == 1


def test_zero_byte_requests_take_nothing() -> None:
    pool = caching()
    block = pool.malloc(0)
    pool.free(block)
    assert pool.memory_stats()["allocation.all.allocated"] == 0


def test_double_free_is_refused() -> None:
    pool = caching()
    block = pool.malloc(MiB)
    pool.free(block)
    with pytest.raises(ValueError, match="not allocated"):
        pool.free(block)


def test_config_is_validated_with_pytorchs_words() -> None:
    with pytest.raises(ValueError, match="max_split_size_mb too small"):
        CachingConfig(max_split_size=10 * MiB)
    with pytest.raises(ValueError, match="Allowed range"):
        CachingConfig(memory_fraction=1.5)


def test_reset_peak_and_accumulated_stats() -> None:
    pool = caching()
    pool.free(pool.malloc(8 * MiB))
    pool.reset_peak_memory_stats()
    stats = pool.memory_stats()
    assert stats["allocated_bytes.all.peak"] == 0 and stats["reserved_bytes.all.peak"] == 20 * MiB
    pool.reset_accumulated_memory_stats()
    stats = pool.memory_stats()
    assert stats["allocated_bytes.all.allocated"] == 0 and stats["num_device_alloc"] == 0
