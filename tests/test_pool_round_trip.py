"""A round trip worked out without the pool (`aisim/engine/pool/round_trip.py`) changes the counters exactly as
allocating and freeing the tensors does, from random states of the caching allocator: what a deferred step of a
vLLM replica relies on."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from aisim.engine.pool import CachingAllocator, CachingConfig, SimulatedDevice
from aisim.engine.pool.round_trip import round_trip

from .pool_helpers import GiB, MiB

CONFIGS = {
    "default": CachingConfig(),
    "max_split": CachingConfig(max_split_size=64 * MiB),
    "divisions": CachingConfig(roundup_power2_divisions=4),
}


def random_state(config: CachingConfig, rng: np.random.Generator) -> tuple[CachingAllocator, list[object]]:
    """A pool after random mallocs and frees of small and large blocks, some still held."""
    pool = CachingAllocator(SimulatedDevice(16 * GiB), config)
    held: list[object] = []
    for _ in range(int(rng.integers(5, 40))):
        if held and rng.random() < 0.45:
            pool.free(held.pop(int(rng.integers(len(held)))))  # type: ignore[arg-type]
        else:
            size = int(rng.choice([rng.integers(1, 2 * MiB), rng.integers(2 * MiB, 300 * MiB)]))
            held.append(pool.malloc(size))
    return pool, held


def random_shape(rng: np.random.Generator) -> tuple[tuple[str, int], ...]:
    sizes = [int(rng.choice([rng.integers(1, MiB), rng.integers(MiB, 8 * MiB), rng.integers(8 * MiB, 200 * MiB)]))
             for _ in range(int(rng.integers(1, 6)))]
    return tuple((f"activation:{i}", size) for i, size in enumerate(sizes))


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
def test_a_worked_out_round_trip_changes_the_counters_as_the_allocator_does(config: str) -> None:
    rng = np.random.default_rng(sorted(CONFIGS).index(config))
    worked_out = 0
    for _ in range(300):
        pool, _held = random_state(CONFIGS[config], rng)
        shape = random_shape(rng)
        real = copy.deepcopy(pool)
        blocks = [real.malloc(size) for _, size in shape]
        for block in blocks:
            real.free(block)
        trip = round_trip(pool, shape)
        if trip is None:  # it needed a segment from the device (or crossed a threshold): the allocator runs
            assert real.memory_stats()["num_device_alloc"] > pool.memory_stats()["num_device_alloc"] or \
                real.watch.entered != pool.watch.entered
            continue
        worked_out += 1
        trip.apply(pool)
        assert pool.memory_stats() == real.memory_stats()
        assert pool.ops == real.ops
        assert pool.state() == real.state()  # and the blocks are as they were
    assert worked_out >= 80, f"only {worked_out} of 300 trips were worked out: the test checks too little"
