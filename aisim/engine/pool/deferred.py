"""Exact shortcuts for the allocations an engine step makes and frees again: deferred round trips.

Every step of a vLLM replica allocates its activations (at least the logits) and frees them when it
ends. When the caching allocator serves them from cached blocks (no segment taken from or given back to
the device, no out-of-memory retry) and nobody else touches the pool meanwhile, the round trip leaves
the pool's blocks exactly as they were (each split block merges back on its free) and changes only
counters, by amounts that depend on the pool's state and the step's sizes alone. `StepMemo` records
those changes on the second round trip of a shape from a known state of the pool (its *base*: the
pool's `version` when it was last known to be in it) and, for later steps of that shape, the pool only
*defers* them: nothing is allocated, and when the step ends the recorded counter changes are applied
(lifetime totals, peaks, the operation count). The result is the same, counter for counter
(`bench/run_speed.py --against` compares every allocator's `memory_stats`).

Anything that reads or changes the pool while a round trip is deferred (another replica's malloc, a
memory map, `memory_stats`, a fault taking memory, an unload) first *settles* it: the step's tensors
are allocated for real, from the same state as at the step's start, so what it sees is what it would
have seen. Nothing is deferred with stream uses pending, memory history recorded, garbage collection
or expandable segments, nor a trip that crossed a usage threshold (an event). Peaks cannot have been
reset under a valid base (a reset changes the version).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .caching import CachingAllocator
    from .stats import Stat

Shape = tuple[tuple[str, int], ...]
"""A step's tensors, (tag, bytes) in allocation order: what a trip is recorded for."""

SEEN = 1024
"""Step shapes (their tensors' tags and sizes) remembered as seen once (a trip is recorded the second
time a shape comes)."""


class Trip:
    """What one round trip of a shape does to the pool's counters, from its base."""

    __slots__ = ("changes", "ops")

    def __init__(self, changes: list[tuple[Stat, int, int, int]], ops: int) -> None:
        self.changes = changes
        """(stat, lifetime increases, lifetime decreases, the highest value it took when that raised its
        peak, else -1), for the stats the trip changes."""
        self.ops = ops

    def apply(self, pool: CachingAllocator) -> None:
        for stat, allocated, freed, reach in self.changes:
            stat.allocated += allocated
            stat.freed += freed
            if reach > stat.peak:  # noqa: PLR1730
                stat.peak = reach
        pool.ops += self.ops
        pool.version += 1


def _quiet(pool: CachingAllocator) -> tuple[int, ...]:
    """What an exact round trip leaves as it was, besides the blocks: the device and retry counters, the
    threshold events and levels entered."""
    stats = pool.stats
    return (stats.num_device_alloc, stats.num_device_free, stats.num_alloc_retries, stats.num_ooms,
            stats.num_sync_all_streams, len(pool.watch.events), *pool.watch.entered.values())


@dataclass
class _Before:
    shape: Shape | None
    """The trip's shape when it is to be recorded; None when it is only checked."""
    version: int
    quiet: tuple[int, ...]
    ops: int
    tensors: int
    stats: tuple[tuple[int, int, int, int], ...] = ()
    """(current, peak, allocated, freed) of every stat, when recorded."""


@dataclass
class StepMemo:
    """One replica's recorded round trips in one pool, valid while the pool is in their base state."""

    pool: CachingAllocator
    base: int = -1
    """The pool's version when it was last known to be in the base state (-1: unknown)."""
    trips: dict[Shape, Trip] = field(default_factory=dict)
    seen: set[Shape] = field(default_factory=set)
    recording: _Before | None = None
    deferred: bool = False
    stats: list[Stat] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stats = self.pool.stats._all_stats()

    def begin(self, shape: Shape, owner: Any) -> bool:
        """A step allocates `shape` now (the trip's key): True when the pool
        deferred it (allocate nothing), False when the caller allocates for real (this memo then watches the
        round trip, to record it)."""
        pool = self.pool
        if not pool.can_defer():
            self.base = -1
            return False
        if pool.version != self.base:  # somebody changed the pool: this state is the new base
            self.trips.clear()
            self.base = pool.version
        trip = self.trips.get(shape)
        if trip is not None:
            pool.defer(owner, shape, trip)
            self.deferred = True
            return True
        seen = shape in self.seen
        if not seen:  # the first time it is only checked (is the pool in its base after it?)
            if len(self.seen) >= SEEN:
                self.seen.clear()
            self.seen.add(shape)
        before = _Before(shape if seen else None, pool.version, _quiet(pool), pool.ops, len(shape))
        if seen:
            before.stats = tuple((s.current, s.peak, s.allocated, s.freed) for s in self.stats)
        self.recording = before
        return False

    def end(self) -> None:
        """The step's tensors are freed (or its deferred trip is due): keep the base, record the trip."""
        pool = self.pool
        if self.deferred:
            self.deferred = False
            if pool.deferred_pending():
                pool.complete_deferred()
                self.base = pool.version
            return  # settled by somebody: the version moved on, and `begin` takes the new base
        before, self.recording = self.recording, None
        if before is None:
            return
        if pool.version != before.version + 2 * before.tensors or _quiet(pool) != before.quiet:
            self.base = -1  # not a lone round trip from the cache
            return
        if before.shape is not None:
            changes = []
            for stat, (current, peak, allocated, freed) in zip(self.stats, before.stats):
                if stat.current != current:
                    self.base = -1
                    return
                change = (stat, stat.allocated - allocated, stat.freed - freed, stat.peak if stat.peak > peak else -1)
                if change[1] or change[2] or change[3] >= 0:
                    changes.append(change)
            self.trips[before.shape] = Trip(changes, pool.ops - before.ops)
        self.base = pool.version
