"""Human quantities (`120ms`, `80GiB`, `3.35TB/s`, `5/s`) parsed once into exact integers.

Every quantity in a scenario is written with its unit and stored in one integer unit: durations in
nanoseconds, sizes in bytes, bandwidths in bytes per second, compute in FLOP/s, power in
milliwatts, and rates as an integer count per integer period. Decimal digits are read with
`decimal.Decimal`, so `1.1s` is exactly 1_100_000_000 ns; a result finer than the unit (a third
of a byte) is rounded to the nearest integer, except for durations: simulated time is whole
nanoseconds, so a duration finer than that (`0.5ns`, `1.0000000001s`) is refused, not rounded.

In YAML a quantity must be a string with a unit (the JSON Schema says so). Python callers may
also pass the integer in its storage unit, so `Duration` accepts `5_000_000` as 5 ms.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, PlainSerializer, WithJsonSchema

from ..errors import UsageError

_NUMBER = r"(\d+(?:\.\d+)?|\.\d+)"

DURATION_UNITS: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "min": 60_000_000_000,
    "h": 3_600_000_000_000,
}
SIZE_UNITS: dict[str, int] = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}
FLOP_UNITS: dict[str, int] = {"": 1, "G": 10**9, "T": 10**12, "P": 10**15}
POWER_UNITS: dict[str, int] = {"mW": 1, "W": 1_000, "kW": 1_000_000}
RATE_PERIODS: dict[str, int] = {
    "s": DURATION_UNITS["s"],
    "min": DURATION_UNITS["min"],
    "m": DURATION_UNITS["m"],
    "h": DURATION_UNITS["h"],
}
COUNT_SUFFIXES: dict[str, int] = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


def alternation(units: dict[str, int]) -> str:
    """A regex alternation of the units, longest first (so `min` wins over `m`)."""
    return "|".join(re.escape(u) for u in sorted(units, key=len, reverse=True) if u)


DURATION_PATTERN = rf"^\s*{_NUMBER}\s*({alternation(DURATION_UNITS)})\s*$"
SIZE_PATTERN = rf"^\s*{_NUMBER}\s*({alternation(SIZE_UNITS)})\s*$"
BANDWIDTH_PATTERN = rf"^\s*{_NUMBER}\s*({alternation(SIZE_UNITS)})\s*/\s*s\s*$"
FLOPS_PATTERN = rf"^\s*{_NUMBER}\s*([GTP]?)\s*FLOP(?:S|/s)\s*$"
POWER_PATTERN = rf"^\s*{_NUMBER}\s*({alternation(POWER_UNITS)})\s*$"
RATE_PATTERN = rf"^\s*{_NUMBER}\s*/\s*({alternation(RATE_PERIODS)})\s*$"
COUNT_PATTERN = rf"^\s*{_NUMBER}\s*([KMBT]?)\s*$"


class QuantityError(UsageError, ValueError):
    """A string that is not the quantity it should be."""


def _scaled(text: str, pattern: str, scale: Callable[[str], int], expected: str, whole: str | None = None) -> int:
    """The quantity in its storage unit; with `whole`, one that is not a whole number of units is refused."""
    match = re.match(pattern, text)
    if match is None:
        raise QuantityError(f"{text!r} is not {expected}")
    try:
        value = Decimal(match.group(1)) * scale(match.group(2))
    except InvalidOperation as error:  # pragma: no cover - the pattern admits only decimals
        raise QuantityError(f"{text!r} is not {expected}") from error
    if whole is not None and value != value.to_integral_value():
        raise QuantityError(f"{text!r} is finer than {whole}")
    return int(value.to_integral_value())


def _parser(pattern: str, units: dict[str, int], expected: str, whole: str | None = None) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        if isinstance(value, bool):
            raise QuantityError(f"{value!r} is not {expected}")
        if isinstance(value, int):
            return value
        if not isinstance(value, str):
            raise QuantityError(f"{value!r} is not {expected}")
        return _scaled(value, pattern, units.__getitem__, expected, whole)

    parse.__doc__ = f"Parse {expected} into an integer."
    return parse


DURATION_EXPECTED = "a duration with a unit, like '120ms', '2s' or '10m' (ns, us, ms, s, m, h)"
SIZE_EXPECTED = "a size with a unit, like '512B', '2MiB' or '80GB' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
BANDWIDTH_EXPECTED = "a bandwidth, like '3.35TB/s' or '25GiB/s'"
FLOPS_EXPECTED = "a compute rate, like '989TFLOPS' or '312 TFLOP/s'"
POWER_EXPECTED = "a power, like '700W'"
RATE_EXPECTED = "a rate, like '5/s', '600/min' or '100000/h'"
COUNT_EXPECTED = "a count, like 8030261248, '8.03B' or '512K'"

parse_duration = _parser(DURATION_PATTERN, DURATION_UNITS, DURATION_EXPECTED, "1ns, the resolution of simulated time")
parse_size = _parser(SIZE_PATTERN, SIZE_UNITS, SIZE_EXPECTED)
parse_bandwidth = _parser(BANDWIDTH_PATTERN, SIZE_UNITS, BANDWIDTH_EXPECTED)
parse_flops = _parser(FLOPS_PATTERN, FLOP_UNITS, FLOPS_EXPECTED)
parse_power = _parser(POWER_PATTERN, POWER_UNITS, POWER_EXPECTED)
parse_count = _parser(COUNT_PATTERN, COUNT_SUFFIXES, COUNT_EXPECTED)


@dataclass(frozen=True, order=True)
class Rate:
    """`count` events every `period_ns` nanoseconds, both exact integers (`2.5/s` is 5 per 2 s)."""

    count: int
    period_ns: int

    @property
    def per_second(self) -> float:
        return self.count * DURATION_UNITS["s"] / self.period_ns

    def __str__(self) -> str:
        seconds = Decimal(self.period_ns) / DURATION_UNITS["s"]
        per = "s" if seconds == 1 else f"{seconds.normalize():f}s"
        return f"{self.count}/{per}"


def parse_rate(value: Any) -> Rate:
    """Parse `5/s`, `600/min` or `2.5/s` into an exact `Rate`."""
    if isinstance(value, Rate):
        return value
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not {RATE_EXPECTED}")
    match = re.match(RATE_PATTERN, value)
    if match is None:
        raise QuantityError(f"{value!r} is not {RATE_EXPECTED}")
    amount = Decimal(match.group(1))
    period = RATE_PERIODS[match.group(2)]
    exponent = amount.as_tuple().exponent
    scale = 10 ** max(0, -int(exponent))
    return Rate(int(amount * scale), period * scale)


def _quantity(parse: Callable[[Any], Any], pattern: str, expected: str, *, integer_ok: bool = False) -> Any:
    """The pydantic annotation for one kind of quantity: parser, schema and the expectation text."""
    string_schema = {"type": "string", "pattern": pattern, "x-aisim-expected": expected}
    schema: dict[str, Any] = string_schema
    if integer_ok:
        schema = {"anyOf": [{"type": "integer", "minimum": 0}, string_schema], "x-aisim-expected": expected}
    return (BeforeValidator(parse), WithJsonSchema(schema))


Duration = Annotated[int, *_quantity(parse_duration, DURATION_PATTERN, DURATION_EXPECTED)]
"""Nanoseconds, written as `120ms`."""
ByteSize = Annotated[int, *_quantity(parse_size, SIZE_PATTERN, SIZE_EXPECTED, integer_ok=True)]
"""Bytes, written as `80GiB` or as a plain integer of bytes."""
Bandwidth = Annotated[int, *_quantity(parse_bandwidth, BANDWIDTH_PATTERN, BANDWIDTH_EXPECTED)]
"""Bytes per second, written as `3.35TB/s`."""
FlopRate = Annotated[int, *_quantity(parse_flops, FLOPS_PATTERN, FLOPS_EXPECTED)]
"""FLOP per second, written as `989TFLOPS`."""
Power = Annotated[int, *_quantity(parse_power, POWER_PATTERN, POWER_EXPECTED)]
"""Milliwatts, written as `700W`."""
Count = Annotated[int, *_quantity(parse_count, COUNT_PATTERN, COUNT_EXPECTED, integer_ok=True)]
"""A large count such as a parameter count, written as `8.03B` or as an integer."""
RateValue = Annotated[
    Rate,
    BeforeValidator(parse_rate),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "pattern": RATE_PATTERN, "x-aisim-expected": RATE_EXPECTED}),
]
"""An exact rate, written as `5/s`."""

RATE_ABOVE_ZERO = rf"^\s*(?=[\d.]*[1-9])(\d+(?:\.\d+)?|\.\d+)\s*/\s*({alternation(RATE_PERIODS)})\s*$"
RATE_ABOVE_ZERO_EXPECTED = "a rate above 0, like '5/s', '600/min' or '100000/h'"


def _above_zero(rate: Rate) -> Rate:
    if rate.count == 0:
        raise ValueError(f"{rate} is not {RATE_ABOVE_ZERO_EXPECTED}")
    return rate


PositiveRate = Annotated[
    RateValue,
    AfterValidator(_above_zero),
    WithJsonSchema({"type": "string", "pattern": RATE_ABOVE_ZERO, "x-aisim-expected": RATE_ABOVE_ZERO_EXPECTED}),
]
"""A rate above 0 (arrivals and rate limits divide by it)."""
