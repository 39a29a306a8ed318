"""Distributions of durations (latency overrides, network delay) and of token counts (workloads).

One family of shapes serves both value kinds; the value type is the generic parameter:
`constant`, `uniform`, `normal`, `lognormal` and `empirical` (percentile points, interpolated).
Shorthands keep simple cases short: `200ms` is a constant, `120-350ms` a uniform range; for
token counts `128` is a constant and `100-2000` a uniform range. Prompt lengths (`Length` shapes)
are at least 1 token in every parameter. The engine samples them.
"""

from __future__ import annotations

import itertools
import re
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator

from .base import Spec
from .units import DURATION_PATTERN, DURATION_UNITS, Duration

V = TypeVar("V")

PERCENTILE_KEY = r"^p(100|[1-9]?[0-9](\.[0-9]+)?)$"
_DURATION_UNIT = "(" + "|".join(sorted(DURATION_UNITS, key=len, reverse=True)) + ")"
DURATION_RANGE = rf"^\s*(\d+(?:\.\d+)?)\s*{_DURATION_UNIT}?\s*-\s*(\d+(?:\.\d+)?)\s*{_DURATION_UNIT}\s*$"
COUNT_RANGE = r"^\s*(\d+)\s*-\s*(\d+)\s*$"
LENGTH_RANGE = r"^\s*0*([1-9]\d*)\s*-\s*0*([1-9]\d*)\s*$"


class _Named(Spec):
    """Base of the generic shapes; pydantic cannot read attribute docstrings of parametrized models."""

    model_config = ConfigDict(use_attribute_docstrings=False)


class Constant(_Named, Generic[V]):
    """Always the same value."""

    kind: Literal["constant"] = Field(description="Distribution shape.")
    value: V = Field(description="The value.")


class Uniform(_Named, Generic[V]):
    """Uniform between `min` and `max`, inclusive."""

    kind: Literal["uniform"] = Field(description="Distribution shape.")
    min: V = Field(description="Smallest value.")
    max: V = Field(description="Largest value.")

    @model_validator(mode="after")
    def _ordered(self) -> Uniform[V]:
        if self.min > self.max:  # type: ignore[operator]
            raise ValueError("min must not exceed max")
        return self


class Normal(_Named, Generic[V]):
    """Normal with `mean` and `stddev`, clipped to [`min`, `max`] (`min` defaults to 0)."""

    kind: Literal["normal"] = Field(description="Distribution shape.")
    mean: V = Field(description="Mean.")
    stddev: V = Field(description="Standard deviation.")
    min: V | None = Field(None, description="Lower clip; samples below it are raised to it (0 when absent).")
    max: V | None = Field(None, description="Upper clip; samples above it are lowered to it.")

    @model_validator(mode="after")
    def _ordered(self) -> Normal[V]:
        if self.min is not None and self.max is not None and self.min > self.max:  # type: ignore[operator]
            raise ValueError("min must not exceed max")
        return self


class LogNormal(_Named, Generic[V]):
    """Log-normal with the given `median` and shape `sigma` (the stddev of the log), clipped to `max`."""

    kind: Literal["lognormal"] = Field(description="Distribution shape.")
    median: V = Field(description="Median (exp of the mean of the log).")
    sigma: float = Field(gt=0, le=10, description="Standard deviation of the natural log of the value.")
    max: V | None = Field(None, description="Upper clip.")


class Empirical(_Named, Generic[V]):
    """Piecewise-linear inverse CDF through percentile points, like `{p50: 200ms, p99: 800ms}`."""

    kind: Literal["empirical"] = Field(description="Distribution shape.")
    percentiles: dict[Annotated[str, Field(pattern=PERCENTILE_KEY)], V] = Field(
        min_length=2, description="Percentile points `pNN: value`; values must not decrease as the percentile grows."
    )

    @model_validator(mode="after")
    def _monotone(self) -> Empirical[V]:
        points = sorted((float(k[1:]), v) for k, v in self.percentiles.items())
        values = [v for _, v in points]
        if any(b < a for a, b in itertools.pairwise(values)):  # type: ignore[operator]
            raise ValueError("percentile values must not decrease as the percentile grows")
        return self

    def points(self) -> list[tuple[float, Any]]:
        """(quantile in 0..1, value) pairs in ascending order."""
        return sorted((float(k[1:]) / 100, v) for k, v in self.percentiles.items())


def _expand_duration(value: Any) -> Any:
    """`200ms` becomes a constant and `120-350ms` (or `120ms-350ms`) a uniform range."""
    if not isinstance(value, str):
        return value
    ranged = re.match(DURATION_RANGE, value)
    if ranged:
        low, low_unit, high, high_unit = ranged.groups()
        return {"kind": "uniform", "min": f"{low}{low_unit or high_unit}", "max": f"{high}{high_unit}"}
    return {"kind": "constant", "value": value}


def _expand_count(value: Any) -> Any:
    """`128` becomes a constant and `100-2000` a uniform range."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {"kind": "constant", "value": value}
    if isinstance(value, str):
        ranged = re.match(COUNT_RANGE, value)
        if ranged:
            return {"kind": "uniform", "min": int(ranged.group(1)), "max": int(ranged.group(2))}
    return value


TokenCount = Annotated[int, Field(ge=0, le=10_000_000)]
"""A number of tokens."""


RequestTokens = Annotated[int, Field(ge=1, le=10_000_000)]
"""A request's prompt length: at least one token, as vLLM refuses an empty prompt (and the engine
would never schedule a request with nothing to prefill)."""


class ConstantDuration(Constant[Duration]):
    """Always the same duration."""


class UniformDuration(Uniform[Duration]):
    """A duration uniform between `min` and `max`."""


class NormalDuration(Normal[Duration]):
    """A normal duration, clipped at 0 (or `min`) and `max`."""


class LogNormalDuration(LogNormal[Duration]):
    """A log-normal duration: `median` and `sigma` of the log."""


class EmpiricalDuration(Empirical[Duration]):
    """A duration interpolated between percentile points."""


class ConstantCount(Constant[TokenCount]):
    """Always the same token count."""


class UniformCount(Uniform[TokenCount]):
    """A token count uniform between `min` and `max`."""


class NormalCount(Normal[TokenCount]):
    """A normal token count, clipped at 0 (or `min`) and `max`."""


class LogNormalCount(LogNormal[TokenCount]):
    """A log-normal token count: `median` and `sigma` of the log."""


class EmpiricalCount(Empirical[TokenCount]):
    """A token count interpolated between percentile points."""


class ConstantLength(Constant[RequestTokens]):
    """Always the same request length."""


class UniformLength(Uniform[RequestTokens]):
    """A request length uniform between `min` and `max`."""


class NormalLength(Normal[RequestTokens]):
    """A normal request length, clipped at `min` and `max`; the engine raises draws below 1 to 1."""

    stddev: TokenCount = Field(description="Standard deviation.")


class LogNormalLength(LogNormal[RequestTokens]):
    """A log-normal request length: `median` and `sigma` of the log."""


class EmpiricalLength(Empirical[RequestTokens]):
    """A request length interpolated between percentile points."""


_DurationShape = Annotated[
    ConstantDuration | UniformDuration | NormalDuration | LogNormalDuration | EmpiricalDuration,
    Field(discriminator="kind"),
]
_CountShape = Annotated[
    ConstantCount | UniformCount | NormalCount | LogNormalCount | EmpiricalCount,
    Field(discriminator="kind"),
]

DURATION_SHORTHAND = {
    "type": "string",
    "pattern": f"({DURATION_PATTERN})|({DURATION_RANGE})",
    "x-aisim-expected": "a duration like '200ms', a range like '120-350ms', or a distribution mapping with 'kind'",
}
_LengthShape = Annotated[
    ConstantLength | UniformLength | NormalLength | LogNormalLength | EmpiricalLength,
    Field(discriminator="kind"),
]
_COUNT_EXPECTED = "a token count like 128, a range like '100-2000', or a distribution mapping with 'kind'"
COUNT_SHORTHAND = {
    "anyOf": [
        {"type": "integer", "minimum": 0},
        {"type": "string", "pattern": COUNT_RANGE, "x-aisim-expected": _COUNT_EXPECTED},
    ],
}
_LENGTH_EXPECTED = "a token count of at least 1 like 128, a range like '100-2000', or a distribution mapping with 'kind'"
LENGTH_SHORTHAND = {
    "anyOf": [
        {"type": "integer", "minimum": 1},
        {"type": "string", "pattern": LENGTH_RANGE, "x-aisim-expected": _LENGTH_EXPECTED},
    ],
}

DurationDistribution = Annotated[
    _DurationShape,
    BeforeValidator(
        _expand_duration,
        json_schema_input_type=Annotated[str, WithJsonSchema(DURATION_SHORTHAND)] | _DurationShape,
    ),
]
"""A distribution of durations; `200ms` and `120-350ms` are shorthands."""
CountDistribution = Annotated[
    _CountShape,
    BeforeValidator(
        _expand_count,
        json_schema_input_type=Annotated[int | str, WithJsonSchema(COUNT_SHORTHAND)] | _CountShape,
    ),
]
"""A distribution of token counts; `128` and `100-2000` are shorthands."""
LengthDistribution = Annotated[
    _LengthShape,
    BeforeValidator(
        _expand_count,
        json_schema_input_type=Annotated[int | str, WithJsonSchema(LENGTH_SHORTHAND)] | _LengthShape,
    ),
]
"""A distribution of prompt lengths (at least 1 token); `128` and `100-2000` are shorthands."""
