"""Human quantities are parsed exactly into integer units, and bad ones are refused."""

from __future__ import annotations

import pytest

from aisim.scenario.units import (
    QuantityError,
    Rate,
    parse_bandwidth,
    parse_count,
    parse_duration,
    parse_flops,
    parse_power,
    parse_rate,
    parse_size,
)


@pytest.mark.parametrize(
    ("text", "ns"),
    [("120ms", 120_000_000), ("2s", 2_000_000_000), ("1.1s", 1_100_000_000), ("10m", 600_000_000_000),
     ("1h", 3_600_000_000_000), ("250us", 250_000), ("250µs", 250_000), ("7ns", 7), (" 3 min ", 180_000_000_000),
     (".5s", 500_000_000), ("0s", 0)],
)
def test_durations_are_exact_nanoseconds(text: str, ns: int) -> None:
    assert parse_duration(text) == ns


@pytest.mark.parametrize(
    ("text", "n"),
    [("80GiB", 80 * 2**30), ("80GB", 80 * 10**9), ("512B", 512), ("2MiB", 2 * 2**20), ("1.5KiB", 1536),
     ("79.1GiB", round(79.1 * 2**30))],
)
def test_sizes_are_bytes(text: str, n: int) -> None:
    assert parse_size(text) == n


def test_sizes_accept_plain_bytes_and_round_fractions_to_the_nearest_byte() -> None:
    assert parse_size(4096) == 4096
    assert parse_size("0.3B") == 0
    assert parse_size("0.6B") == 1


def test_bandwidth_compute_power_and_counts() -> None:
    assert parse_bandwidth("3.35TB/s") == 3_350_000_000_000
    assert parse_bandwidth("25 GiB/s") == 25 * 2**30
    assert parse_flops("989TFLOPS") == 989 * 10**12
    assert parse_flops("312 TFLOP/s") == 312 * 10**12
    assert parse_power("700W") == 700_000
    assert parse_count("8.03B") == 8_030_000_000
    assert parse_count("512K") == 512_000


def test_rates_are_exact_integer_ratios() -> None:
    assert parse_rate("5/s") == Rate(5, 1_000_000_000)
    assert parse_rate("2.5/s") == Rate(25, 10_000_000_000)
    assert parse_rate("2.5/s").per_second == 2.5
    assert parse_rate("600/min").per_second == 10.0
    assert str(parse_rate("5/s")) == "5/s"


@pytest.mark.parametrize(
    ("parse", "text"),
    [(parse_duration, "12 parsecs"), (parse_duration, "5"), (parse_duration, True), (parse_size, "80 gigs"),
     (parse_bandwidth, "3TB"), (parse_rate, "5 per second"), (parse_rate, 5), (parse_flops, "989 TB/s")],
)
def test_wrong_quantities_are_refused_with_the_expected_form(parse, text) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(QuantityError, match="is not"):
        parse(text)


@pytest.mark.parametrize("text", ["0.0000001ns", "0.5ns", "1.0000000001s"])
def test_durations_finer_than_a_nanosecond_are_refused_not_rounded(text: str) -> None:
    with pytest.raises(QuantityError, match="finer than 1ns"):
        parse_duration(text)
    assert parse_duration("1.5us") == 1_500
