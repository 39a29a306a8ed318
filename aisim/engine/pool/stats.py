"""`torch.cuda.memory_stats()`: the counters every allocator keeps, under PyTorch's names.

PyTorch keeps each statistic as an array of three `Stat`s (aggregate, small pool, large pool), each
with `current`, `peak`, `allocated` (lifetime increases) and `freed` (lifetime decreases); the
Python side flattens the nested dictionary into dotted keys sorted by name
(`allocated_bytes.all.current`, ...). The update rules live with the allocators; this module holds
the arrays and the flattening, so all three allocators report the same way.
"""

from __future__ import annotations

from typing import Protocol

ALL, SMALL, LARGE = 0, 1, 2
"""Indices into a stat array, PyTorch's `StatType`: AGGREGATE, SMALL_POOL, LARGE_POOL."""
POOL_NAMES = ("all", "small_pool", "large_pool")
STAT_ARRAYS = (
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
)
COUNTERS = ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free")
OWED_AT_MOST = 256
"""Distinct round trips owed before they are settled unasked (each holds a kilobyte or so, and a server that
nobody asks for memory stats runs for ever)."""


class Owed(Protocol):
    """A change of lifetime totals and peaks that can be applied `times` times at once (`round_trip.Trip`)."""

    def settle(self, times: int) -> None: ...


class Stat:
    """One statistic: the current value, its high-water mark, lifetime increases and decreases."""

    __slots__ = ("allocated", "current", "freed", "peak")

    def __init__(self) -> None:
        self.current = 0
        self.peak = 0
        self.allocated = 0
        self.freed = 0

    def increase(self, amount: int) -> None:
        self.current += amount
        self.allocated += amount
        self.peak = max(self.peak, self.current)

    def decrease(self, amount: int) -> None:
        self.current -= amount
        self.freed += amount

    def as_dict(self) -> dict[str, int]:
        return {"current": self.current, "peak": self.peak, "allocated": self.allocated, "freed": self.freed}


StatArray = tuple[Stat, Stat, Stat]


def increase(array: StatArray, pool: int, amount: int) -> None:
    """Add `amount` to the aggregate and, when `pool` is SMALL or LARGE, to that pool's stat."""
    stat = array[0]
    stat.current += amount
    stat.allocated += amount
    if stat.current > stat.peak:  # noqa: PLR1730 (hot path: a comparison is cheaper than max())
        stat.peak = stat.current
    if pool:
        stat = array[pool]
        stat.current += amount
        stat.allocated += amount
        if stat.current > stat.peak:  # noqa: PLR1730
            stat.peak = stat.current


def decrease(array: StatArray, pool: int, amount: int) -> None:
    """Subtract `amount` from the aggregate and, when `pool` is SMALL or LARGE, from that pool's stat."""
    stat = array[0]
    stat.current -= amount
    stat.freed += amount
    if pool:
        stat = array[pool]
        stat.current -= amount
        stat.freed += amount


class DeviceStats:
    """PyTorch's `DeviceStats`: the nine stat arrays, the event counters and the oversize stats."""

    def __init__(self, pool_split: bool, max_split_size: int = -1) -> None:
        self.pool_split = pool_split
        """Whether `memory_stats` reports `small_pool` / `large_pool` keys (only the caching allocator)."""
        self.allocation: StatArray = (Stat(), Stat(), Stat())
        self.segment: StatArray = (Stat(), Stat(), Stat())
        self.active: StatArray = (Stat(), Stat(), Stat())
        self.inactive_split: StatArray = (Stat(), Stat(), Stat())
        self.allocated_bytes: StatArray = (Stat(), Stat(), Stat())
        self.reserved_bytes: StatArray = (Stat(), Stat(), Stat())
        self.active_bytes: StatArray = (Stat(), Stat(), Stat())
        self.inactive_split_bytes: StatArray = (Stat(), Stat(), Stat())
        self.requested_bytes: StatArray = (Stat(), Stat(), Stat())
        self.oversize_allocations = Stat()
        self.oversize_segments = Stat()
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0
        self.max_split_size = max_split_size
        """-1 when unlimited: PyTorch stores SIZE_MAX in an int64."""
        self.owed: dict[Owed, int] = {}
        """Round trips applied but not yet added to the lifetime totals and peaks, with how often. They change
        no current value, and totals add up and peaks take the highest in any order, so they are added only
        when somebody reads those (`as_dict`) or resets them: a step then costs a dictionary increment."""

    def owe(self, change: Owed) -> None:
        """`change` happened once more; what is owed is settled unasked past `OWED_AT_MOST` distinct changes."""
        owed = self.owed
        owed[change] = owed.get(change, 0) + 1
        if len(owed) > OWED_AT_MOST:
            self.settle()

    def settle(self) -> None:
        """Add what is owed to the lifetime totals and peaks."""
        owed, self.owed = self.owed, {}
        for change, times in owed.items():
            change.settle(times)

    def as_dict(self) -> dict[str, int]:
        """The flattened, key-sorted dictionary `torch.cuda.memory_stats()` returns."""
        if self.owed:
            self.settle()
        out: dict[str, int] = {name: getattr(self, name) for name in COUNTERS}
        out["max_split_size"] = self.max_split_size
        pools = range(3) if self.pool_split else range(1)
        for name in STAT_ARRAYS:
            array: StatArray = getattr(self, name)
            for index in pools:
                for field, value in array[index].as_dict().items():
                    out[f"{name}.{POOL_NAMES[index]}.{field}"] = value
        for name in ("oversize_allocations", "oversize_segments"):
            for field, value in getattr(self, name).as_dict().items():
                out[f"{name}.{field}"] = value
        return dict(sorted(out.items()))

    def reset_peak(self) -> None:
        """`reset_peak_memory_stats()`: every peak becomes the current value."""
        self.settle()
        for stat in self._all_stats():
            stat.peak = stat.current

    def reset_accumulated(self) -> None:
        """`reset_accumulated_memory_stats()`: zero the lifetime totals and the event counters."""
        self.settle()
        for stat in self._all_stats():
            stat.allocated = 0
            stat.freed = 0
        for name in COUNTERS:
            setattr(self, name, 0)

    def _all_stats(self) -> list[Stat]:
        stats = [stat for name in STAT_ARRAYS for stat in getattr(self, name)]
        return [*stats, self.oversize_allocations, self.oversize_segments]
