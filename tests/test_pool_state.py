"""PoolState metrics, threshold events, the scenario factory and determinism."""

from __future__ import annotations

import json

import numpy as np

from aisim.engine.pool import (
    BuddyAllocator,
    CachingAllocator,
    SimulatedDevice,
    SlabAllocator,
    make_allocator,
)
from aisim.scenario.hardware import BuddyPool, CachingPool, SlabPool

from .pool_helpers import GiB, KiB, MiB


def test_state_metrics_of_a_split_segment() -> None:
    pool = CachingAllocator(SimulatedDevice(GiB, non_pytorch=100 * MiB))
    a = pool.malloc(3 * MiB)
    pool.malloc(5 * MiB)
    pool.free(a)
    state = pool.state()
    assert (state.reserved, state.allocated, state.cached) == (20 * MiB, 5 * MiB, 15 * MiB)
    assert state.free == GiB - 100 * MiB - 20 * MiB
    assert state.held_outside == 100 * MiB
    assert state.fragmentation == 0.75  # (20 - 5) / 20
    assert state.largest_free_block == 12 * MiB
    assert state.external_fragmentation == 0.2  # 1 - 12 / 15
    assert state.inactive_split == 15 * MiB
    bins = [(b.log2, b.allocated, b.cached) for b in state.bins]
    assert bins == [(21, 0, 3 * MiB), (22, 5 * MiB, 0), (23, 0, 12 * MiB)]
    assert state.usage == round((5 * MiB + 100 * MiB) / GiB, 6)
    json.dumps(state.to_dict())


def test_thresholds_raise_and_clear_events() -> None:
    clock = iter(range(100, 10_000, 100))
    pool = CachingAllocator(SimulatedDevice(100 * MiB), warning=0.5, critical=0.7, clock=lambda: next(clock))
    a = pool.malloc(40 * MiB)
    assert pool.drain_events() == []  # 40 % is not above 50 %
    b = pool.malloc(12 * MiB)  # 52 %
    pool.malloc(20 * MiB)  # 72 %
    pool.free(a)  # 32 %
    events = pool.drain_events()
    assert [(e.previous, e.level, e.rising) for e in events] == [
        ("normal", "warning", True),
        ("warning", "critical", True),
        ("critical", "normal", False),
    ]
    assert [e.used for e in events] == [52 * MiB, 72 * MiB, 32 * MiB]
    assert [e.time_ns for e in events] == [100, 200, 300]
    assert pool.events == [] and pool.state().level == "normal"
    pool.set_other_process(999, 30 * MiB)  # another process counts: 62 %
    [event] = pool.drain_events()
    assert (event.level, event.used) == ("warning", 62 * MiB)
    pool.free(b)
    assert pool.drain_events()[0].level == "normal"


def test_usage_exactly_at_a_threshold_is_not_above_it() -> None:
    pool = BuddyAllocator(SimulatedDevice(16 * MiB), 4 * KiB, warning=0.5, critical=0.75)
    pool.malloc(8 * MiB)
    assert pool.drain_events() == []
    pool.malloc(4 * KiB)
    assert pool.drain_events()[0].level == "warning"


def test_factory_builds_each_allocator_from_the_scenario() -> None:
    caching = make_allocator(
        CachingPool.model_validate(
            {"allocator": "caching", "maxSplitSize": "64MiB", "expandableSegments": True, "reservedFraction": 0.1}
        ),
        10 * GiB,
        device_index=2,
    )
    assert isinstance(caching, CachingAllocator)
    assert caching.config.max_split_size == 64 * MiB and caching.config.expandable_segments
    assert caching.device.index == 2 and caching.device.non_pytorch == GiB
    buddy = make_allocator(BuddyPool.model_validate({"allocator": "buddy", "minBlock": "4KiB"}), 4 * GiB)
    assert isinstance(buddy, BuddyAllocator) and buddy.min_block == 4 * KiB
    assert buddy.memory_reserved() == 4 * GiB
    slab = make_allocator(
        SlabPool.model_validate({"allocator": "slab", "sizeClasses": ["64KiB", "1MiB"], "slabSize": "4MiB",
                                 "thresholds": {"warning": 0.6, "critical": 0.7}}),
        GiB,
    )
    assert isinstance(slab, SlabAllocator) and slab.size_classes == [64 * KiB, MiB] and slab.slab_size == 4 * MiB
    assert (slab.watch.warning, slab.watch.critical) == (0.6, 0.7)


def test_same_operations_same_state() -> None:
    def run() -> str:
        pool = make_allocator(CachingPool.model_validate({"allocator": "caching"}), 16 * GiB)
        rng = np.random.default_rng(5)
        live = []
        for size in rng.integers(1, 40 * MiB, 300):
            live.append(pool.malloc(int(size), stream=int(size) % 3))
            if rng.random() < 0.5:
                pool.free(live.pop(int(rng.integers(len(live)))))
        return json.dumps([pool.state().to_dict(), pool.memory_stats()])

    assert run() == run()
