"""Fragmentation of the simulated allocators under fixed, exponential, Zipf and lognormal request sizes.

Issue 5's experiment, set up like the calibration of reference §3.4 so the figures can be compared:
a steady state of `--live` objects (500) kept by `--ops` replace operations (60,000: free a uniformly
random live object, allocate a new one), sizes drawn from a seeded numpy generator, the mean of
`--seeds` seeds (3), all on stream 0 of an 80 GiB device (large enough that nothing runs out of memory).

    python bench/fragmentation.py [--ops 60000] [--live 500] [--seeds 3] [--sample-every 1000]

Columns (sizes in MiB, percentages of bytes):
- live, alloc, footprint: peaks of requested bytes, allocated bytes and the memory the allocator
  needs from the device: `reserved_bytes` for the caching and slab allocators; for the buddy
  allocator, whose arena is reserved whole, the span it has touched: per top block, the distance
  from its start to the end of the highest block handed out in it (a heap growing at its top);
- overhead: peak footprint / peak live - 1 (Johnstone & Wilson's measure);
- rounding: mean (allocated - requested) / allocated, internal fragmentation;
- frag: mean (footprint - allocated) / footprint, PyTorch's "reserved but unallocated" share;
- EF: mean 1 - largest free block / total free, over the memory the pool holds but has not handed out
  (for the buddy allocator, over the free blocks inside its touched span: the untouched rest of a
  64 GiB top block would otherwise dominate);
- split: mean `inactive_split_bytes` (cached memory `empty_cache()` cannot return; not shown for the
  buddy allocator, where it is every free byte of a partly used top block, tens of GiB here);
- ops/s: mallocs plus frees per wall second, timed in a separate run without sampling.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aisim.engine.pool import (
    Allocation,
    Allocator,
    BuddyAllocator,
    CachingAllocator,
    CachingConfig,
    PoolState,
    SimulatedDevice,
    SlabAllocator,
)

MiB = 1 << 20
GiB = 1 << 30
CAPACITY = 80 * GiB

DISTRIBUTIONS = ("fixed 1 MiB", "exponential", "zipf", "lognormal")
CALIBRATION = {
    # Reference §3.4, a generic best-fit allocator: footprint overhead, mean EF, power-of-two waste.
    "fixed 1 MiB": (0.0, 0.0, 0.0),
    "exponential": (11.4, 72.0, 30.7),
    "zipf": (14.9, 58.0, 28.2),
    "lognormal": (18.9, 45.0, 30.7),
}


def draw_sizes(name: str, n: int, rng: np.random.Generator) -> list[int]:
    """`n` request sizes in bytes from one of the distributions of reference §3.4."""
    if name == "fixed 1 MiB":
        return [MiB] * n
    if name == "exponential":  # mean 1 MiB, 512 B granularity
        raw = rng.exponential(MiB, n)
    elif name == "zipf":  # s = 1.1 over 64 log-spaced sizes from 512 B to 64 MiB, the smallest most frequent
        sizes = np.geomspace(512, 64 * MiB, 64)
        weights = np.arange(1, 65, dtype=float) ** -1.1
        raw = rng.choice(sizes, n, p=weights / weights.sum())
    elif name == "lognormal":  # median 1 MiB, sigma 1.5
        raw = rng.lognormal(np.log(MiB), 1.5, n)
    else:
        raise ValueError(name)
    return (np.maximum(1, np.ceil(raw / 512)) * 512).astype(np.int64).tolist()


ALLOCATORS: dict[str, Callable[[], Allocator]] = {
    "caching": lambda: CachingAllocator(SimulatedDevice(CAPACITY)),
    "caching+expandable": lambda: CachingAllocator(SimulatedDevice(CAPACITY), CachingConfig(expandable_segments=True)),
    "caching+max_split 64M": lambda: CachingAllocator(
        SimulatedDevice(CAPACITY), CachingConfig(max_split_size=64 * MiB)
    ),
    "buddy 512B": lambda: BuddyAllocator(SimulatedDevice(CAPACITY), 512),
    "slab (defaults)": lambda: SlabAllocator(SimulatedDevice(CAPACITY)),
    "slab 64K..16M/64M": lambda: SlabAllocator(
        SimulatedDevice(CAPACITY), [64 << 10, 256 << 10, MiB, 4 * MiB, 16 * MiB], 64 * MiB
    ),
}
"""Each allocator with its defaults, plus the variants the docs and `scenarios/fragmentation.yaml` use."""


@dataclass
class Result:
    live: float
    allocated: float
    footprint: float
    rounding: float
    frag: float
    ef: float
    split: float
    ooms: float


def footprint_and_ef(state: PoolState) -> tuple[int, float]:
    """Reserved bytes and EF; for the buddy allocator, its touched span and the EF inside it."""
    if state.allocator != "buddy":
        return state.reserved, state.external_fragmentation
    footprint = largest = total = 0
    for segment in state.segments:
        end = max((b.address + b.size for b in segment.blocks if b.state != "cached"), default=segment.address)
        footprint += end - segment.address
        for block in segment.blocks:
            if block.state == "cached" and block.address < end:
                total += block.size
                largest = max(largest, block.size)
    return footprint, 1 - largest / total if total else 0.0


def churn(pool: Allocator, sizes: list[int], live: int, picks: list[int], sample_every: int) -> Result:
    """Fill to `live` objects, then replace one at random per remaining size; sample the metrics."""
    held: list[Allocation] = []
    samples: list[tuple[float, float, float, float]] = []
    high: dict[int, int] = {}
    buddy = pool if isinstance(pool, BuddyAllocator) else None
    for i, size in enumerate(sizes):
        if len(held) >= live:
            j = picks[i] % len(held)
            held[j], held[-1] = held[-1], held[j]
            pool.free(held.pop())
        block = pool.malloc(size)
        held.append(block)
        if buddy is not None:
            base = buddy.top_block(block.address)[0]
            high[base] = max(high.get(base, 0), block.address + block.size - base)
        if i >= live and i % sample_every == 0:
            state = pool.state()
            footprint, ef = footprint_and_ef(state)
            samples.append((
                1 - state.requested / state.allocated,
                1 - state.allocated / footprint,
                ef,
                state.inactive_split,
            ))
    stats = pool.memory_stats()
    mean = np.mean(samples, axis=0) if samples else np.zeros(4)
    return Result(
        live=stats["requested_bytes.all.peak"],
        allocated=stats["allocated_bytes.all.peak"],
        footprint=sum(high.values()) if buddy else stats["reserved_bytes.all.peak"],
        rounding=float(mean[0]),
        frag=float(mean[1]),
        ef=float(mean[2]),
        split=float(mean[3]),
        ooms=stats["num_ooms"],
    )


def ops_per_second(make: Callable[[], Allocator], sizes: list[int], live: int, picks: list[int]) -> float:
    pool = make()
    held: list[Allocation] = []
    ops = 0
    started = time.perf_counter()
    for i, size in enumerate(sizes):
        if len(held) >= live:
            j = picks[i] % len(held)
            held[j], held[-1] = held[-1], held[j]
            pool.free(held.pop())
            ops += 1
        held.append(pool.malloc(size))
        ops += 1
    return ops / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=60_000, help="replace operations after the fill")
    parser.add_argument("--live", type=int, default=500, help="live objects in the steady state")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--sample-every", type=int, default=1000, help="operations between metric samples")
    args = parser.parse_args()

    print(f"{args.live} live objects, {args.ops:,} replace operations, mean of {args.seeds} seeds, "
          f"{CAPACITY // GiB} GiB device; sizes in MiB, peaks; rounding / frag / EF / split are time means\n")
    header = (f"{'distribution':<12} {'allocator':<22} {'live':>7} {'alloc':>7} {'footprint':>9} {'overhead':>8} "
              f"{'rounding':>8} {'frag':>6} {'EF':>6} {'split':>7} {'ops/s':>9}")
    print(header)
    print("-" * len(header))
    for dist in DISTRIBUTIONS:
        draws = []
        for seed in range(args.seeds):
            rng = np.random.default_rng([seed, DISTRIBUTIONS.index(dist)])
            sizes = draw_sizes(dist, args.live + args.ops, rng)
            picks = rng.integers(0, 1 << 30, len(sizes)).tolist()
            draws.append((sizes, picks))
        for name, make in ALLOCATORS.items():
            results = [churn(make(), sizes, args.live, picks, args.sample_every) for sizes, picks in draws]
            speed = ops_per_second(make, draws[0][0], args.live, draws[0][1])
            r = Result(*(float(np.mean([getattr(x, f) for x in results])) for f in Result.__dataclass_fields__))
            split = "-" if name.startswith("buddy") else f"{r.split / MiB:.1f}"
            print(f"{dist:<12} {name:<22} {r.live / MiB:7.0f} {r.allocated / MiB:7.0f} {r.footprint / MiB:9.0f} "
                  f"{r.footprint / r.live - 1:8.1%} {r.rounding:8.1%} {r.frag:6.1%} {r.ef:6.1%} "
                  f"{split:>7} {speed:9,.0f}" + (f"  ({r.ooms:.0f} OOMs)" if r.ooms else ""))
        ref = CALIBRATION[dist]
        pow2 = f"p2 {ref[2]:.1f}%"
        print(f"{'':<12} {'reference §3.4 best fit':<22} {'':>7} {'':>7} {'':>9} {ref[0] / 100:8.1%} "
              f"{pow2:>8} {'':>6} {ref[1] / 100:6.1%}")
        print()


if __name__ == "__main__":
    main()
