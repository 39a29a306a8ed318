"""PyTorch's size rules (reference §1.1-§1.3), checked against the examples stated there."""

from __future__ import annotations

from aisim.engine.pool.rounding import (
    allocation_size,
    division_band,
    is_small,
    round_size,
    roundup_power2_next_division,
)

from .pool_helpers import GiB, MiB


def test_requests_round_to_512_bytes_with_a_512_byte_minimum() -> None:
    assert round_size(1) == 512
    assert round_size(511) == 512
    assert round_size(512) == 512
    assert round_size(513) == 1024
    assert round_size(3 * MiB) == 3 * MiB


def test_power2_divisions_cut_the_octave_into_equal_steps() -> None:
    # The source's own example: 1200 with 4 divisions -> steps 1024/1280/1536/1792 -> 1280.
    assert roundup_power2_next_division(1200, 4) == 1280
    assert roundup_power2_next_division(1024, 4) == 1024  # a power of two is unchanged
    assert roundup_power2_next_division(1280, 4) == 1280  # on a step already
    # round_size uses divisions only above 512 x d; 1200 < 2048, so 512-byte rounding applies.
    assert round_size(1200, 4) == 1536
    assert round_size(int(1.2 * MiB), 4) == int(1.25 * MiB)
    assert round_size(5 * MiB, 4) == 5 * MiB
    assert round_size(5 * MiB + 1, 4) == 6 * MiB
    assert round_size(5 * MiB + 1, 1) == 5 * MiB + 512  # one division is off


def test_divisions_are_configured_per_octave_from_1_MiB() -> None:
    assert division_band(100) == 0
    assert division_band(int(1.5 * MiB)) == 0
    assert division_band(3 * MiB) == 1
    assert division_band(100 * GiB) == 15
    bands = tuple([1] * 2 + [8] * 14)
    assert round_size(int(1.2 * MiB), bands) == int(1.2 * MiB) // 512 * 512 + 512  # band 0: off
    assert round_size(5 * MiB + 1, bands) == int(5.5 * MiB)  # band 2: 8 steps of 0.5 MiB


def test_pool_and_segment_size() -> None:
    assert is_small(MiB) and not is_small(MiB + 512)
    assert allocation_size(512) == 2 * MiB
    assert allocation_size(MiB) == 2 * MiB
    assert allocation_size(MiB + 512) == 20 * MiB
    assert allocation_size(10 * MiB - 512) == 20 * MiB
    assert allocation_size(10 * MiB) == 10 * MiB
    assert allocation_size(int(19.5 * MiB)) == 20 * MiB
    assert allocation_size(round_size(int(10.1 * MiB))) == 12 * MiB
