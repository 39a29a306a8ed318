"""Draws from the scenario's distributions with a seeded numpy Generator.

Every draw comes from a `numpy.random.Generator` that the simulation derives from the scenario
seed with `SeedSequence.spawn`, one per component, so adding a component never changes the draws
of another. Values are returned as integers in the distribution's unit (nanoseconds or tokens).
"""

from __future__ import annotations

import numpy as np

from ..scenario.distributions import (
    ConstantCount,
    ConstantDuration,
    ConstantLength,
    EmpiricalCount,
    EmpiricalDuration,
    EmpiricalLength,
    LogNormalCount,
    LogNormalDuration,
    LogNormalLength,
    NormalCount,
    NormalDuration,
    NormalLength,
    UniformCount,
    UniformDuration,
    UniformLength,
)

LARGEST = 2**62
"""Draws are capped here (146 years in nanoseconds) so that a wide log-normal cannot overflow int64."""

Distribution = (
    ConstantDuration | UniformDuration | NormalDuration | LogNormalDuration | EmpiricalDuration
    | ConstantCount | UniformCount | NormalCount | LogNormalCount | EmpiricalCount
    | ConstantLength | UniformLength | NormalLength | LogNormalLength | EmpiricalLength
)


class Draws:
    """One value at a time from a distribution, drawn in chunks (a numpy call per value is slow).

    Give each `Draws` its own generator: the values then do not depend on how draws of different
    distributions interleave.
    """

    def __init__(self, dist: Distribution, rng: np.random.Generator, chunk: int = 256) -> None:
        self.dist = dist
        self.rng = rng
        self.chunk = chunk
        self._values: list[int] = []

    def next(self) -> int:
        if not self._values:
            self._values = sample(self.dist, self.rng, self.chunk).tolist()[::-1]
        return self._values.pop()

    def take(self, count: int) -> list[int]:
        """`count` values at once (in one numpy call when it is large)."""
        if count > self.chunk:
            return sample(self.dist, self.rng, count).tolist()
        values = self._values
        if len(values) >= count:  # what `next` would give `count` times, in one slice
            taken = values[:-count - 1:-1]
            del values[len(values) - count:]
            return taken
        return [self.next() for _ in range(count)]


def sample(dist: Distribution, rng: np.random.Generator, size: int) -> np.ndarray:
    """`size` draws as int64, never negative nor above `LARGEST`; normal and log-normal draws are
    clipped to min / max."""
    if isinstance(dist, (ConstantDuration, ConstantCount, ConstantLength)):
        values = np.full(size, float(dist.value))
    elif isinstance(dist, (UniformDuration, UniformCount, UniformLength)):
        if isinstance(dist, (UniformCount, UniformLength)):
            return rng.integers(dist.min, dist.max + 1, size=size, dtype=np.int64)
        values = rng.uniform(dist.min, dist.max, size=size)
    elif isinstance(dist, (NormalDuration, NormalCount, NormalLength)):
        values = rng.normal(dist.mean, dist.stddev, size=size)
        values = np.clip(values, dist.min or 0, dist.max if dist.max is not None else None)
    elif isinstance(dist, (LogNormalDuration, LogNormalCount, LogNormalLength)):
        values = np.exp(rng.normal(np.log(max(dist.median, 1)), dist.sigma, size=size))
        if dist.max is not None:
            values = np.minimum(values, dist.max)
    else:
        points = dist.points()
        quantiles = np.array([q for q, _ in points])
        levels = np.array([float(v) for _, v in points])
        values = np.interp(rng.uniform(quantiles[0], quantiles[-1], size=size), quantiles, levels)
    return np.clip(np.rint(values), 0, LARGEST).astype(np.int64)
