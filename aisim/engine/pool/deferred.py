"""Exact shortcuts for the allocations an engine step makes and frees again: deferred round trips.

Every step of a vLLM replica allocates its activations (at least the logits) and frees them when it
ends. When the caching allocator can serve them from cached blocks (no segment taken from or given back to
the device, no threshold crossed) and nobody else touches the pool meanwhile, the round trip leaves the
pool's blocks exactly as they were and changes only counters (`round_trip.py` works them out). The pool
then only *defers* the step: nothing is allocated, and when the step ends the trip's counter changes are
applied (lifetime totals, peaks, the operation count). The result is the same, counter for counter
(`bench/run_speed.py --against` compares every allocator's `memory_stats`). A trip is kept per shape for
later steps while the pool stays in the state it was worked out from (its *base*: the pool's `version`
when it was last known to be in it).

Anything that reads or changes the pool while a round trip is deferred (another replica's malloc, a
memory map, `memory_stats`, a fault taking memory, an unload) first *settles* it: the step's tensors
are allocated for real, from the same state as at the step's start, so what it sees is what it would
have seen. Nothing is deferred with stream uses pending, memory history recorded, garbage collection
or expandable segments (`CachingAllocator.can_defer`). Peaks cannot have been reset under a valid base
(a reset changes the version).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .round_trip import Shape, Trip, round_trip

if TYPE_CHECKING:
    from .caching import CachingAllocator

__all__ = ["Shape", "StepMemo", "Trip"]


@dataclass
class StepMemo:
    """One replica's round trips in one pool, valid while the pool is in their base state."""

    pool: CachingAllocator
    base: int = -1
    """The pool's version when it was last known to be in the base state (-1: unknown)."""
    kept: int = 1024
    """Trips kept for shapes that come again, at most (a step of more than 512 tokens makes a shape of its own,
    so most are used once; a kept trip costs about a kilobyte, and a server runs for ever)."""
    trips: dict[Shape, Trip] = field(default_factory=dict)
    deferred: bool = False

    def begin(self, shape: Shape, owner: Any) -> bool:
        """A step allocates `shape` now (the trip's key): True when the pool deferred it (allocate nothing),
        False when the caller allocates for real."""
        pool = self.pool
        if not pool.can_defer():
            self.base = -1
            return False
        if pool.version != self.base:  # somebody changed the pool: this state is the new base
            self.trips.clear()
            self.base = pool.version
        trip = self.trips.get(shape)
        if trip is None:
            trip = round_trip(pool, shape)
            if trip is None:
                return False
            if len(self.trips) < self.kept:
                self.trips[shape] = trip
        pool.defer(owner, shape, trip)
        self.deferred = True
        return True

    def end(self, owner: Any) -> None:
        """`owner`'s deferred step is due to free its tensors: apply its trip, unless somebody settled it (then
        its tensors were allocated and are freed for real, and the version moved on: `begin` takes a new base).
        Another replica's step deferred meanwhile on a shared pool stays deferred."""
        self.deferred = False
        pool = self.pool
        if pool.complete_deferred(owner):
            self.base = pool.version
