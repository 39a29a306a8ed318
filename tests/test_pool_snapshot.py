"""Replaying PyTorch memory snapshots (`aisim/engine/pool/snapshot.py`, `replay.py`, `replayer.py`).

The snapshots are built here as `torch.cuda.memory._snapshot()` builds them (reference §1.12): a dict
with `segments`, `device_traces` and `allocator_settings`, trace entries with `action`, `addr`, `size`,
`stream`, `time_us` and `frames`, pickled with the standard pickle module. Each recorded trace is the
one PyTorch's rules (§1.1-§1.7) produce for the requests, worked out by hand in the comments, and the
expected figures are derived the same way, never read back from the replay.
"""

from __future__ import annotations

import json
import os
import pickle
from collections import OrderedDict
from itertools import count
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aisim.cli import main
from aisim.engine.pool import (
    Allocation,
    CachingAllocator,
    CachingConfig,
    OutOfMemoryError,
    SimulatedDevice,
)
from aisim.engine.pool.replay import replay, replay_all
from aisim.engine.pool.snapshot import (
    SnapshotError,
    load_snapshot,
    parse_snapshot,
    snapshot_of,
)

from .pool_helpers import GiB, MiB

A, B, C = (0x7F00_0000_0000 + k * 0x1000_0000 for k in range(3))
"""Segment addresses of the recorded allocator (any distinct values do)."""
FRAMES = [{"filename": "train.py", "line": 42, "name": "forward"}]


class Trace:
    """Builds a device trace the way the allocator records it, with increasing `time_us`."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self._clock = count(1000, 7)

    def add(self, action: str, addr: int, size: int, stream: int = 0) -> Trace:
        self.entries.append({"action": action, "addr": addr, "size": size, "stream": stream,
                             "time_us": next(self._clock), "frames": FRAMES})
        return self

    def segment(self, addr: int, size: int, stream: int = 0) -> Trace:
        return self.add("segment_alloc", addr, size, stream)

    def alloc(self, addr: int, size: int, stream: int = 0) -> Trace:
        return self.add("alloc", addr, size, stream)

    def free(self, addr: int, size: int, stream: int = 0) -> Trace:
        """A same-stream free: `free_requested` immediately followed by `free_completed` (§1.7)."""
        return self.add("free_requested", addr, size, stream).add("free_completed", addr, size, stream)

    def oom(self, device_free: int, size: int, stream: int = 0) -> Trace:
        self.entries.append({"action": "oom", "device_free": device_free, "size": size, "stream": stream,
                             "time_us": next(self._clock), "frames": FRAMES})
        return self


def block(address: int, size: int, state: str = "inactive", requested: int = 0) -> dict[str, Any]:
    return {"address": address, "size": size, "requested_size": requested, "state": state, "frames": []}


def segment(address: int, blocks: list[dict[str, Any]], kind: str = "large", stream: int = 0) -> dict[str, Any]:
    active = [b for b in blocks if b["state"] != "inactive"]
    return {
        "device": 0, "address": address, "total_size": sum(b["size"] for b in blocks),
        "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
        "active_size": sum(b["size"] for b in active), "requested_size": sum(b["requested_size"] for b in active),
        "stream": stream, "segment_type": kind, "segment_pool_id": (0, 0), "is_expandable": False,
        "frames": [], "blocks": blocks,
    }


def snapshot(trace: Trace, segments: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "segments": segments,
        "device_traces": [trace.entries],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
                               "expandable_segments": False, "roundup_power2_divisions": {}},
    }


def write(tmp_path: Path, data: Any, name: str = "snapshot.pickle") -> Path:
    path = tmp_path / name
    path.write_bytes(pickle.dumps(data))
    return path


def load(tmp_path: Path, data: Any) -> Any:
    return load_snapshot(write(tmp_path, data))


# recorded traces, worked out with PyTorch's rules


def devlog_small_then_large() -> dict[str, Any]:
    """The dev-log example (§1.5): 8 x 16 MiB, free all, then 4 x 32 MiB.

    16 MiB is >= 10 MiB, so each miss gets a segment of exactly 16 MiB (2 MiB rounding) with nothing
    left to split; freed blocks never merge across segments and a 16 MiB block cannot hold 32 MiB, so
    each 32 MiB request gets a new 32 MiB segment: 12 cudaMallocs, 256 MiB reserved.
    """
    trace = Trace()
    for k in range(8):
        trace.segment(A + k * 16 * MiB, 16 * MiB).alloc(A + k * 16 * MiB, 16 * MiB)
    for k in range(8):
        trace.free(A + k * 16 * MiB, 16 * MiB)
    for k in range(4):
        trace.segment(B + k * 32 * MiB, 32 * MiB).alloc(B + k * 32 * MiB, 32 * MiB)
    for k in range(4):
        trace.free(B + k * 32 * MiB, 32 * MiB)
    segments = [segment(A + k * 16 * MiB, [block(A + k * 16 * MiB, 16 * MiB)]) for k in range(8)]
    segments += [segment(B + k * 32 * MiB, [block(B + k * 32 * MiB, 32 * MiB)]) for k in range(4)]
    return snapshot(trace, segments)


def devlog_large_then_small() -> dict[str, Any]:
    """4 x 32 MiB, free all, then 8 x 16 MiB: each 32 MiB block splits into two 16 MiB (remainder 16 > 1 MiB)."""
    trace = Trace()
    for k in range(4):
        trace.segment(B + k * 32 * MiB, 32 * MiB).alloc(B + k * 32 * MiB, 32 * MiB)
    for k in range(4):
        trace.free(B + k * 32 * MiB, 32 * MiB)
    for k in range(8):
        trace.alloc(B + k * 16 * MiB, 16 * MiB)
    for k in range(8):
        trace.free(B + k * 16 * MiB, 16 * MiB)
    return snapshot(trace, [segment(B + k * 32 * MiB, [block(B + k * 32 * MiB, 32 * MiB)]) for k in range(4)])


def pools_and_splits() -> dict[str, Any]:
    """Both pools, a split, an exact fit and an unsplit remainder (§1.3 and §1.5).

    - 3 MiB: large pool, below 10 MiB -> a 20 MiB segment at A, split: 3 MiB + 17 MiB free.
    - 5 MiB: fits the 17 MiB remainder at A + 3 MiB (split again: 12 MiB free at A + 8 MiB).
    - 1000 B: rounded to 1024, small pool -> a 2 MiB segment at B.
    - 1 MiB: small pool (<= 1 MiB), fits the 2 MiB - 1 KiB remainder at B + 1 KiB.
    - 12 MiB: exactly the 12 MiB block at A + 8 MiB.
    - 39 MiB: >= 10 MiB -> a 40 MiB segment at C; the 1 MiB remainder is not > 1 MiB: no split.
    Reserved 20 + 2 + 40 = 62 MiB from 3 cudaMallocs; allocated 3 + 5 + 12 + 40 MiB + 1 KiB + 1 MiB.
    """
    trace = Trace()
    trace.segment(A, 20 * MiB).alloc(A, 3 * MiB).alloc(A + 3 * MiB, 5 * MiB)
    trace.segment(B, 2 * MiB).alloc(B, 1000).alloc(B + 1024, MiB)
    trace.alloc(A + 8 * MiB, 12 * MiB)
    trace.segment(C, 40 * MiB).alloc(C, 39 * MiB)
    segments = [
        segment(A, [block(A, 3 * MiB, "active_allocated", 3 * MiB), block(A + 3 * MiB, 5 * MiB, "active_allocated", 5 * MiB),
                    block(A + 8 * MiB, 12 * MiB, "active_allocated", 12 * MiB)]),
        segment(B, [block(B, 1024, "active_allocated", 1000), block(B + 1024, MiB, "active_allocated", MiB),
                    block(B + 1024 + MiB, MiB - 1024)], kind="small"),
        segment(C, [block(C, 40 * MiB, "active_allocated", 39 * MiB)]),
    ]
    return snapshot(trace, segments)


# replay figures


def test_the_devlog_sequences_give_pytorchs_segment_counts_and_reserved_memory(tmp_path: Path) -> None:
    first = replay(load(tmp_path, devlog_small_then_large()), "caching", tolerance=0)
    assert (first.segment_allocs, first.recorded_segment_allocs) == (12, 12)
    assert first.peak_reserved == first.recorded_peak_reserved == 256 * MiB
    assert first.peak_allocated == 128 * MiB
    assert first.recorded_start_reserved == 0  # 256 MiB of segments at the end minus the 12 recorded segment_allocs
    assert first.first_divergence is None and first.max_difference == 0
    second = replay(load(tmp_path, devlog_large_then_small()), "caching", tolerance=0)
    assert (second.segment_allocs, second.recorded_segment_allocs) == (4, 4)
    assert second.peak_reserved == second.recorded_peak_reserved == 128 * MiB
    assert second.first_divergence is None


def test_the_other_allocators_replay_the_same_trace_by_their_own_rules(tmp_path: Path) -> None:
    snap = load(tmp_path, devlog_small_then_large())
    buddy = replay(snap, "buddy", capacity=GiB)
    # Power-of-two blocks: 16 and 32 MiB stay as they are; the arena is the whole GiB, reserved once.
    assert buddy.peak_allocated == 128 * MiB and buddy.peak_reserved == GiB
    assert (buddy.initial_segment_allocs, buddy.segment_allocs) == (1, 0)
    assert buddy.peak_difference == GiB - 256 * MiB
    slab = replay(snap, "slab", capacity=GiB)
    # Above the largest class (1 MiB) each request gets a dedicated segment, freed with it.
    assert (slab.segment_allocs, slab.segment_frees) == (12, 12)
    assert slab.peak_reserved == 128 * MiB and slab.final_reserved == 0
    assert slab.peak_difference == -128 * MiB


def test_pools_splits_and_unsplit_remainders_match_the_recorded_allocator(tmp_path: Path) -> None:
    result = replay(load(tmp_path, pools_and_splits()), "caching", tolerance=0, sample_every=1)
    assert (result.segment_allocs, result.recorded_segment_allocs) == (3, 3)
    assert result.peak_reserved == result.recorded_peak_reserved == 62 * MiB
    assert result.peak_allocated == (3 + 5 + 12 + 40) * MiB + 1024 + MiB
    assert result.max_difference == 0 and result.first_divergence is None
    assert result.initial_blocks == 0 and result.inconsistent_events == 0
    # One sample per event plus the start; after the last event 62 MiB reserved, 1 MiB - 1 KiB cached.
    assert len(result.samples) == result.events + 1 == 10  # 3 segment_allocs, 6 allocs
    last = result.samples[-1]
    assert (last.event, last.time_us, last.reserved, last.recorded_reserved) == (8, 1000 + 7 * 8, 62 * MiB, 62 * MiB)
    assert last.fragmentation == round((MiB - 1024) / (62 * MiB), 6)
    assert last.inactive_split == MiB - 1024  # the free tail of the split small segment


def test_a_record_stream_free_keeps_the_block_until_free_completed(tmp_path: Path) -> None:
    # 20 MiB on stream 0, read by another stream: free_requested now, free_completed later (§1.7).
    # Until then the block cannot be reused, so the second 20 MiB request needs a segment of its own;
    # after free_completed the third reuses the first block: 2 cudaMallocs, 40 MiB.
    trace = Trace().segment(A, 20 * MiB).alloc(A, 20 * MiB).add("free_requested", A, 20 * MiB)
    trace.segment(B, 20 * MiB).alloc(B, 20 * MiB).add("free_completed", A, 20 * MiB).alloc(A, 20 * MiB)
    segments = [segment(A, [block(A, 20 * MiB, "active_allocated", 20 * MiB)]),
                segment(B, [block(B, 20 * MiB, "active_allocated", 20 * MiB)])]
    result = replay(load(tmp_path, snapshot(trace, segments)), "caching", tolerance=0)
    assert (result.segment_allocs, result.recorded_segment_allocs) == (2, 2)
    assert result.peak_reserved == 40 * MiB and result.max_difference == 0
    assert result.final_allocated == 40 * MiB


def test_a_mid_life_snapshot_allocates_what_lived_before_the_trace(tmp_path: Path) -> None:
    # Before the ring buffer: 4 MiB at A (still alive, never in the trace) and 6 MiB at B (freed first
    # thing in the trace). The recorded allocator held two 20 MiB segments all along.
    trace = Trace().free(B, 6 * MiB).alloc(A + 4 * MiB, 8 * MiB).free(A + 4 * MiB, 8 * MiB)
    segments = [segment(A, [block(A, 4 * MiB, "active_allocated", 4 * MiB), block(A + 4 * MiB, 16 * MiB)]),
                segment(B, [block(B, 20 * MiB)])]
    result = replay(load(tmp_path, snapshot(trace, segments)), "caching", tolerance=0)
    assert (result.initial_blocks, result.initial_bytes) == (2, 10 * MiB)
    assert result.recorded_start_reserved == result.recorded_peak_reserved == 40 * MiB
    # The model allocates 4 MiB then 6 MiB in one 20 MiB segment (the second splits the 16 MiB rest), and
    # the 8 MiB request later fits the 10 MiB left after the 6 MiB free merges back.
    assert (result.initial_segment_allocs, result.segment_allocs) == (1, 0)
    assert result.peak_reserved == 20 * MiB and result.peak_allocated == 12 * MiB
    assert result.final_allocated == 4 * MiB
    assert result.inconsistent_events == 0 and result.skipped_frees == 0
    first = result.first_divergence
    assert first is not None and (first.event, first.reserved, first.recorded_reserved) == (0, 20 * MiB, 40 * MiB)
    assert replay(load(tmp_path, snapshot(trace, segments)), "caching", tolerance=20 * MiB).first_divergence is None


def expected_oom_message(alloc: str, total: str, free: str, in_use: str, allocated: str, cached: str) -> str:
    """The current message template of §1.10, filled in by hand."""
    return (
        f"CUDA out of memory. Tried to allocate {alloc}. GPU 0 has a total capacity of {total} of which {free} is "
        f"free. Including non-PyTorch memory, this process has {in_use} memory in use. Of the allocated memory "
        f"{allocated} is allocated by PyTorch, and {cached} is reserved by PyTorch but unallocated. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def test_a_model_oom_at_a_small_capacity_is_recorded_and_the_replay_goes_on(tmp_path: Path) -> None:
    # Recorded on a big GPU: three 30 MiB tensors (30 MiB segments each), the third freed, then the
    # first freed and 25 MiB allocated in its block (the 5 MiB rest splits off).
    trace = Trace()
    for addr in (A, B, C):
        trace.segment(addr, 30 * MiB).alloc(addr, 30 * MiB)
    trace.free(C, 30 * MiB).free(A, 30 * MiB).alloc(A, 25 * MiB)
    segments = [segment(A, [block(A, 25 * MiB, "active_allocated", 25 * MiB), block(A + 25 * MiB, 5 * MiB)]),
                segment(B, [block(B, 30 * MiB, "active_allocated", 30 * MiB)]), segment(C, [block(C, 30 * MiB)])]
    result = replay(load(tmp_path, snapshot(trace, segments)), "caching", capacity=64 * MiB)
    # On 64 MiB the third 30 MiB segment does not fit next to 60 MiB: nothing is cached to release.
    [oom] = result.ooms
    assert (oom.event, oom.size, oom.stream, oom.recorded) == (5, 30 * MiB, 0, False)
    assert oom.message == expected_oom_message("30.00 MiB", "64.00 MiB", "4.00 MiB", "60.00 MiB", "60.00 MiB", "0 bytes")
    assert result.skipped_frees == 1 and result.inconsistent_events == 0
    assert result.final_allocated == 55 * MiB and result.segment_allocs == 2
    assert result.recorded_ooms == 0 and result.capacity_source == "given"


def test_a_recorded_oom_sets_the_capacity_and_the_model_runs_out_there_too(tmp_path: Path) -> None:
    trace = Trace().segment(A, 30 * MiB).alloc(A, 30 * MiB).segment(B, 30 * MiB).alloc(B, 30 * MiB)
    trace.oom(device_free=4 * MiB, size=30 * MiB)
    segments = [segment(A, [block(A, 30 * MiB, "active_allocated", 30 * MiB)]),
                segment(B, [block(B, 30 * MiB, "active_allocated", 30 * MiB)])]
    snap = load(tmp_path, snapshot(trace, segments))
    derived = replay(snap, "caching")
    assert (derived.capacity, derived.capacity_source) == (64 * MiB, "oom")  # 60 MiB reserved + 4 MiB free
    [oom] = derived.ooms
    assert (oom.event, oom.recorded) == (4, True) and derived.recorded_ooms == 1
    assert oom.message.startswith("CUDA out of memory. Tried to allocate 30.00 MiB. GPU 0 has a total capacity of "
                                  "64.00 MiB of which 4.00 MiB is free.")
    roomy = replay(snap, "caching", capacity=GiB)
    assert roomy.ooms == () and roomy.recorded_ooms_served == 1 and roomy.final_allocated == 60 * MiB


def test_a_user_empty_cache_is_replayed_but_a_retry_flush_is_left_to_the_model(tmp_path: Path) -> None:
    # empty_cache(): the unsplit 20 MiB segment goes; the small one stays (its block is alive).
    trace = Trace().segment(A, 20 * MiB).alloc(A, 3 * MiB).segment(B, 2 * MiB).alloc(B, 4096)
    trace.free(A, 3 * MiB).add("segment_free", A, 20 * MiB).free(B, 4096)
    cached = replay(load(tmp_path, snapshot(trace, [segment(B, [block(B, 2 * MiB)], kind="small")])), "caching",
                    tolerance=0)
    assert cached.empty_cache_calls == 1 and cached.segment_frees == cached.recorded_segment_frees == 1
    assert cached.final_reserved == cached.recorded_final_reserved == 2 * MiB and cached.max_difference == 0
    # The retry path on 64 MiB: 30 MiB cached, 40 MiB requested -> cudaMalloc fails (70 > 64), the cache
    # is released and the retry succeeds: segment_free then segment_alloc inside one malloc.
    trace = Trace().segment(A, 30 * MiB).alloc(A, 30 * MiB).free(A, 30 * MiB)
    trace.add("segment_free", A, 30 * MiB).segment(B, 40 * MiB).alloc(B, 40 * MiB)
    snap = load(tmp_path, snapshot(trace, [segment(B, [block(B, 40 * MiB, "active_allocated", 40 * MiB)])]))
    retry = replay(snap, "caching", capacity=64 * MiB, tolerance=0)
    assert retry.empty_cache_calls == 0 and (retry.segment_frees, retry.recorded_segment_frees) == (1, 1)
    assert retry.peak_reserved == retry.recorded_peak_reserved == 40 * MiB and retry.max_difference == 0


def test_the_snapshots_allocator_settings_configure_the_caching_model(tmp_path: Path) -> None:
    # With roundup_power2_divisions 4 for every band, 1200 KiB rounds up to 1280 KiB (§1.2).
    trace = Trace().segment(A, 20 * MiB).alloc(A, 1200 * 1024)
    data = snapshot(trace, [segment(A, [block(A, 1280 * 1024, "active_allocated", 1200 * 1024),
                                        block(A + 1280 * 1024, 20 * MiB - 1280 * 1024)])])
    data["allocator_settings"]["roundup_power2_divisions"] = {str(1 << band): 4 for band in range(16)}
    result = replay(load(tmp_path, data), "caching")
    assert result.peak_allocated == 1280 * 1024
    assert result.notes == ("caching model set from allocator_settings: roundup_power2_divisions",)


def test_the_device_parameter_picks_the_trace(tmp_path: Path) -> None:
    data = devlog_large_then_small()
    for seg in data["segments"]:
        seg["device"] = 1
    data["device_traces"] = [[], data["device_traces"][0]]
    snap = load(tmp_path, data)
    assert replay(snap, "caching", device=1).segment_allocs == 4
    assert replay(snap, "caching", device=0).events == 0
    with pytest.raises(SnapshotError, match="no trace for device 2: the snapshot records 2 device"):
        replay(snap, "caching", device=2)


def test_the_caching_model_replays_its_own_history_exactly() -> None:
    """A trace the caching model recorded (streams, record_stream, empty_cache, OOMs) replays with no difference."""
    for config in (CachingConfig(), CachingConfig(expandable_segments=True), CachingConfig(max_split_size=64 * MiB)):
        rng = np.random.default_rng(7)
        pool = CachingAllocator(SimulatedDevice(2 * GiB), config, clock=count(0, 1000).__next__)
        pool.record_history(max_entries=100_000)  # the whole history: both start empty
        live: list[Allocation] = []
        ooms = 0
        for step in range(6000):
            if live and rng.random() < 0.5:
                pool.free(live.pop(int(rng.integers(len(live)))), uses=(5,) if rng.random() < 0.1 else ())
            else:
                try:
                    live.append(pool.malloc(int(rng.lognormal(np.log(MiB), 2)) + 1, stream=int(rng.integers(2))))
                except OutOfMemoryError:
                    ooms += 1
            if step % 100 == 0:
                pool.stream_done(5)
            if step % 2500 == 0:
                pool.empty_cache()
        result = replay(parse_snapshot(snapshot_of(pool)), "caching", capacity=2 * GiB, tolerance=0)
        assert result.max_difference == 0 and result.first_divergence is None, config
        assert result.segment_allocs == result.recorded_segment_allocs > 0, config
        assert result.segment_frees == result.recorded_segment_frees, config
        assert len(result.ooms) == result.recorded_ooms == ooms and result.recorded_ooms_served == 0, config
        assert result.final_reserved == result.recorded_final_reserved == pool.memory_reserved(), config
        assert result.final_allocated == pool.memory_allocated(), config


def test_a_ring_buffer_that_starts_mid_life_accounts_for_every_live_block() -> None:
    """Cut to its last 3,000 entries, the history still ends with exactly the allocator's live blocks."""
    rng = np.random.default_rng(3)
    pool = CachingAllocator(SimulatedDevice(16 * GiB), clock=count(0, 1000).__next__)
    pool.record_history(max_entries=3000)
    live: list[Allocation] = []
    for _ in range(8000):
        if live and rng.random() < 0.5:
            pool.free(live.pop(int(rng.integers(len(live)))))
        else:
            live.append(pool.malloc(int(rng.integers(1, 8 * MiB))))
    result = replay(parse_snapshot(snapshot_of(pool)), "caching")
    assert result.initial_blocks > 0 and result.inconsistent_events == 0 and result.skipped_frees == 0
    assert result.final_allocated == pool.memory_allocated()
    assert result.recorded_final_reserved == pool.memory_reserved()


# reading files


def test_the_unpickler_refuses_a_pickle_that_would_run_code(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.system, (f"touch {marker}",))

    path = write(tmp_path, {"segments": [], "device_traces": [[Exploit()]]})
    with pytest.raises(SnapshotError, match=r"refusing to load the global (posix|nt)\.system: a memory snapshot holds"):
        load_snapshot(path)
    assert not marker.exists()
    with pytest.raises(SnapshotError, match="refusing to load the global collections.OrderedDict"):
        load(tmp_path, OrderedDict(segments=[], device_traces=[]))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"hello, not a snapshot", "neither a pickle nor JSON"),
        (pickle.dumps([{"address": 0}]), "a list, not a dict: torch.cuda.memory_snapshot\\(\\) gives only segments"),
        (pickle.dumps({"segments": []}), "no 'device_traces' key \\(keys: 'segments'\\); expected a PyTorch memory snapshot"),
        (pickle.dumps(42), "a int, not a dict"),
        (pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc", "size": 512}]]}),
         "device_traces\\[0\\]\\[0\\]: no 'addr'"),
        (pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc", "addr": "0x10", "size": 512}]]}),
         "device_traces\\[0\\]\\[0\\]: 'addr' is '0x10', not an integer"),
        (b'{"segments": [], "device_traces": [[}', "not valid JSON"),
    ],
)
def test_a_file_that_is_not_a_snapshot_says_what_was_expected(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "file.bin"
    path.write_bytes(content)
    with pytest.raises(SnapshotError, match=message) as error:
        load_snapshot(path)
    assert str(error.value).startswith(f"{path}: ")


def test_the_same_snapshot_as_json_replays_the_same(tmp_path: Path) -> None:
    data = pools_and_splits()
    json_path = tmp_path / "snapshot.json"
    json_path.write_text(json.dumps(data))
    from_json = replay(load_snapshot(json_path), "caching").to_dict()
    assert from_json == replay(load(tmp_path, data), "caching").to_dict()
    assert json.loads(json.dumps(from_json)) == json.loads(json.dumps(from_json, sort_keys=True))


def test_replay_is_deterministic_and_json_ready(tmp_path: Path) -> None:
    snap = load(tmp_path, devlog_small_then_large())
    first = [r.to_dict() for r in replay_all(snap)]
    assert first == [r.to_dict() for r in replay_all(snap)]
    assert [r["allocator"] for r in first] == ["caching", "buddy", "slab"]
    assert json.loads(json.dumps(first))[0]["peak_reserved"] == 256 * MiB


# the command


def test_the_cli_prints_a_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, devlog_small_then_large())
    assert main(["replay-snapshot", str(path), "--capacity", "1GiB"]) == 0
    out = capsys.readouterr().out
    assert f"{path}: device 0, 48 events (12 alloc, 12 free_completed, 12 free_requested, 12 segment_alloc)" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.split()[:1] in (["caching"], ["buddy"], ["slab"])}
    assert set(rows) == {"caching", "buddy", "slab"}
    assert rows["caching"].split()[1:7] == ["256.00", "MiB", "256.00", "MiB", "0", "bytes"]
    assert "caching: peak reserved 256.00 MiB, the same as recorded" in out
    assert main(["replay-snapshot", str(path), "--allocator", "slab", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    [result] = payload["results"]
    assert result["allocator"] == "slab" and result["capacity"] == 80 * GiB and result["capacity_source"] == "default"
    assert result["peak_reserved"] == 128 * MiB


def test_the_cli_reports_a_bad_file_and_a_bad_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a snapshot")
    assert main(["replay-snapshot", str(path)]) == 1
    assert capsys.readouterr().err.startswith(f"aisim replay-snapshot: {path}: neither a pickle nor JSON")
    assert main(["replay-snapshot", str(path), "--capacity", "lots"]) == 2
    assert "is not a size with a unit" in capsys.readouterr().err
