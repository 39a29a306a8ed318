"""Warning and critical usage events, for the engine's timeline and the TUI's colours.

Usage is (allocated + held outside) / capacity: the memory that is neither free on the device nor
reusable by the pool. It counts other processes (a memory hog pushes a GPU into critical) and
counts a buddy arena or a slab cache only where it is handed out, so the same thresholds mean the
same thing under every allocator. A level is entered when usage rises *above* its fraction and left
when usage falls back to it or below; each change is one event.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

LEVELS = ("normal", "warning", "critical")


@dataclass(frozen=True, slots=True)
class ThresholdEvent:
    """Usage crossed a threshold."""

    level: str
    """The level entered: `normal`, `warning` or `critical`."""
    previous: str
    rising: bool
    usage: float
    used: int
    """allocated + held outside, bytes."""
    capacity: int
    op: int
    """The allocator's operation count (mallocs and frees so far) when it happened."""
    time_ns: int | None
    """The engine clock, when the allocator was given one."""


class ThresholdWatch:
    """Tracks the level for a fixed capacity; `limits(outside)` turns fractions into allocated-byte limits."""

    def __init__(
        self, capacity: int, warning: float = 0.85, critical: float = 0.92, clock: Callable[[], int] | None = None
    ) -> None:
        if not 0 < warning < critical <= 1:
            raise ValueError("thresholds need 0 < warning < critical <= 1")
        self.capacity = capacity
        self.warning = warning
        self.critical = critical
        self.clock = clock
        self.level = 0
        self.events: list[ThresholdEvent] = []
        self.entered = {"warning": 0, "critical": 0}
        """How many times usage rose into each level (kept after `drain_events`, for the report)."""

    def limits(self, outside: int) -> tuple[int, int]:
        """Allocated bytes above which usage is above warning and above critical."""
        return (
            math.floor(self.warning * self.capacity) - outside,
            math.floor(self.critical * self.capacity) - outside,
        )

    def update(self, allocated: int, outside: int, op: int) -> None:
        """Recompute the level and record an event if it changed."""
        warn_at, crit_at = self.limits(outside)
        level = 2 if allocated > crit_at else 1 if allocated > warn_at else 0
        if level == self.level:
            return
        used = allocated + outside
        if level > self.level:
            self.entered[LEVELS[level]] += 1
        self.events.append(
            ThresholdEvent(
                level=LEVELS[level],
                previous=LEVELS[self.level],
                rising=level > self.level,
                usage=round(used / self.capacity, 6),
                used=used,
                capacity=self.capacity,
                op=op,
                time_ns=self.clock() if self.clock else None,
            )
        )
        self.level = level
