"""PyTorch's size rules: request rounding, pool choice and segment size (pytorch/pytorch
`c10/cuda/CUDACachingAllocator.cpp`: `round_size`, `get_pool`, `get_allocation_size`).

Pure functions of a size, so tests can check them against the worked examples and the caching
allocator can inline the common case.
"""

from __future__ import annotations

MIN_BLOCK = 512
"""`kMinBlockSize`: every request is rounded up to a multiple of 512 B."""
SMALL_SIZE = 1024 * 1024
"""`kSmallSize`: rounded requests up to and including 1 MiB use the small pool."""
SMALL_BUFFER = 2 * 1024 * 1024
"""`kSmallBuffer`: small-pool segments are 2 MiB."""
MIN_LARGE_ALLOC = 10 * 1024 * 1024
"""`kMinLargeAlloc`: requests below 10 MiB (and above 1 MiB) get a 20 MiB segment."""
LARGE_BUFFER = 20 * 1024 * 1024
"""`kLargeBuffer`: the 20 MiB segment; also the default `max_non_split_rounding`."""
ROUND_LARGE = 2 * 1024 * 1024
"""`kRoundLarge`: larger segments are rounded up to a multiple of 2 MiB."""
UNLIMITED = (1 << 64) - 1
"""SIZE_MAX, the default `max_split_size`."""
BANDS = 16
"""`kRoundUpPowerOfTwoIntervals`: divisions are configured per octave from 1 MiB to 64 GiB."""

Divisions = int | tuple[int, ...] | None
"""`roundup_power2_divisions`: off, one value for every size, or one value per band (16)."""


def division_band(size: int) -> int:
    """The band of `size`: clamp(floor(log2(size)) - 20, 0, 15); everything below 2 MiB is band 0."""
    return min(max(size.bit_length() - 1 - 20, 0), BANDS - 1)


def divisions_for(size: int, divisions: Divisions) -> int:
    """The configured divisions for a request of `size` bytes (0 when off)."""
    if divisions is None:
        return 0
    if isinstance(divisions, int):
        return divisions
    return divisions[division_band(size)]


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """Round up to the next of `divisions` equal steps of the octave [2^k, 2^(k+1)).

    A power of two is returned unchanged. As in the C++ (`power2_floor >> log2(divisions)`), a
    divisions value that is not a power of two acts as the power of two below it.
    """
    if size & (size - 1) == 0:
        return size
    if divisions < 2:
        raise ValueError("Only 2 or more divisions are supported")
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    rounded = size & ~(step - 1)
    return size if rounded == size else rounded + step


def round_size(size: int, divisions: Divisions = None) -> int:
    """`round_size`: at least 512 B; power-of-two divisions when configured; else a multiple of 512 B."""
    if size < MIN_BLOCK:
        return MIN_BLOCK
    d = divisions_for(size, divisions)
    if d > 1 and size > MIN_BLOCK * d:
        return roundup_power2_next_division(size, d)
    return -(-size // MIN_BLOCK) * MIN_BLOCK


def is_small(rounded: int) -> bool:
    """`get_pool`: the small pool takes rounded sizes up to and including 1 MiB."""
    return rounded <= SMALL_SIZE


def allocation_size(rounded: int) -> int:
    """`get_allocation_size`: the segment a cache miss asks the device for (and `Tried to allocate`)."""
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-rounded // ROUND_LARGE) * ROUND_LARGE
