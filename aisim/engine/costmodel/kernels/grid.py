"""One slice of a kernel table as a function of its sizes: interpolation inside, a roofline rule outside.

A slice is a grid of measured latencies over one to three size axes (GEMM rows, sequence length, batch,
tokens, bytes). Its smallest latency is taken as its kernel's fixed cost, `floor`, and the rest as work
done at some efficiency against the speed of light `SOL` (`roofline.py`). Going beyond a measurement to a
larger size keeps the floor and that efficiency: `t = floor + (t_measured - floor) x SOL(size) /
SOL(measured)`. That fills the cells the collector did not measure (it stops where a large batch of long
sequences runs out of memory), from the nearest measured neighbour of smaller size along an axis; below the
smallest measured size a cell holds its neighbour's time instead (a kernel's fixed cost does not shrink
with the work).

A query interpolates axis by axis between the two grid points around it: affinely in the size (kernel time
is close to affine in tokens, batch, rows, heads, KV length and bytes: a fixed cost plus the work), or as a
power law, log time against log size, along a prefill's sequence length, where the causal work grows with
its square (`TableSpec.power_law`). On rows held back from the tables each rule beats the other on its own
axes (`bench/kernel_fidelity.py --space lin|log`). Between two measured sizes the answer moves monotonically
from one measurement to the other, never beyond them; the measurements themselves are returned as measured,
dips included (a kernel heuristic that picks a faster tile for a larger shape is what vLLM does: a monotone
envelope over the tables doubled the held-back error). Below an axis's range the query is clamped (the
floor); above it, the same rule from the edge: `t(q) = floor + (t(edge) - floor) x SOL(q) / SOL(edge)`, so a GEMM of
65,536 rows costs what 32,768 cost with its variable part scaled by the work. Holding the whole time in
proportion instead (the fixed cost growing with the work) predicted the largest measured sizes from the
next smaller ones with a signed median error of +5.1 % and a p90 |error| of 36 %, against +1.3 % and 18 %
(`bench/kernel_fidelity.py --part edge`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence

import numpy as np

from .roofline import Number, scale, sizes_of

Sol = Callable[[Sequence[Number]], Number]
"""Speed-of-light seconds of a slice's kernel at the given sizes (one array per axis, broadcast)."""


def _fill_forward(values: np.ndarray, axis: int) -> np.ndarray:
    """Each NaN takes the nearest non-NaN value before it along `axis` (stays NaN when there is none)."""
    moved = np.moveaxis(values, axis, -1)
    index = np.where(np.isnan(moved), 0, np.arange(moved.shape[-1]))
    np.maximum.accumulate(index, axis=-1, out=index)
    return np.moveaxis(np.take_along_axis(moved, index, axis=-1), -1, axis)


def _fill_backward(values: np.ndarray, axis: int) -> np.ndarray:
    return np.flip(_fill_forward(np.flip(values, axis), axis), axis)


def fill(ms: np.ndarray, sol: np.ndarray, floor: float) -> np.ndarray:
    """Every NaN cell of `ms` filled: the part above `floor` held in proportion to the speed of light `sol`
    from the nearest smaller measured size along an axis (the last axis first), then, where no smaller size
    was measured, the time of a larger one."""
    out = ms.copy()
    for axis in reversed(range(out.ndim)):
        if not np.isnan(out).any():
            return out
        per_sol = _fill_forward((out - floor) / sol, axis)
        out = np.where(np.isnan(out), floor + per_sol * sol, out)
    while np.isnan(out).any():
        before = int(np.isnan(out).sum())
        for axis in reversed(range(out.ndim)):
            out = np.where(np.isnan(out), _fill_backward(out, axis), out)
        if int(np.isnan(out).sum()) == before:
            raise ValueError("a slice without any measured cell")
    return out


def mesh(axes: Sequence[np.ndarray]) -> list[np.ndarray]:
    return list(np.meshgrid(*[np.asarray(a, dtype=np.float64) for a in axes], indexing="ij"))


class Grid:
    """A whole slice answering `seconds(*sizes)` (vectorised: arrays broadcast)."""

    def __init__(self, axes: Sequence[np.ndarray], log2_ms: np.ndarray, sol: Sol, power_law: Sequence[bool]) -> None:
        measured = ~np.isnan(log2_ms)
        keep = [np.flatnonzero(measured.any(axis=tuple(j for j in range(measured.ndim) if j != i)))
                for i in range(measured.ndim)]
        values = log2_ms[np.ix_(*keep)]
        self.axes = [np.asarray(a, dtype=np.float64)[k] for a, k in zip(axes, keep, strict=True)]
        self.measured = ~np.isnan(values)
        """Which cells hold a measured latency (the rest were filled)."""
        self._sol = sol
        measured_ms = np.exp2(values)
        self.floor_ms = float(np.nanmin(measured_ms))
        """The slice's smallest measured latency: its kernel's fixed cost."""
        self._ms = fill(measured_ms, np.asarray(sol(mesh(self.axes))), self.floor_ms)
        self._power = list(power_law)
        self._x = [np.log2(a) if power else a for a, power in zip(self.axes, self._power, strict=True)]
        # the same numbers as Python lists, for one query at a time (`at`: a few microseconds, not tens)
        self._flat: list[float] = self._ms.ravel().tolist()
        self._strides = [s // self._ms.itemsize for s in self._ms.strides]
        self._axis_lists: list[list[float]] = [a.tolist() for a in self.axes]
        self._x_lists: list[list[float]] = [x.tolist() for x in self._x]

    def seconds(self, *sizes: Number) -> Number:
        """Latency in seconds at the given sizes (one value or array per axis, broadcast together; a float
        when every size is a number)."""
        numbers = sizes_of(sizes)
        if all(isinstance(s, float) for s in numbers):
            return self.at(*numbers)  # type: ignore[arg-type]
        q = [np.asarray(s) for s in numbers]
        index, weight, clamped = [], [], []
        above = np.zeros(q[0].shape, bool)
        for size, axis, x, power in zip(q, self.axes, self._x, self._power, strict=True):
            inside = np.clip(size, axis[0], axis[-1])
            above |= size > axis[-1]
            clamped.append(inside)
            if len(x) == 1:
                index.append(np.zeros(size.shape, np.intp))
                weight.append(np.zeros(size.shape))
                continue
            c = np.log2(inside) if power else inside
            i = np.clip(np.searchsorted(x, c, side="right") - 1, 0, len(x) - 2)
            index.append(i)
            weight.append((c - x[i]) / (x[i + 1] - x[i]))
        seconds = self._blend(0, (), index, weight) / 1e3
        if above.any():
            seconds = np.where(above, scale(seconds, self.floor, self._sol(q) / self._sol(clamped)), seconds)
        return seconds

    def _blend(self, axis: int, cell: tuple[np.ndarray, ...], index: list[np.ndarray], weight: list[np.ndarray]
               ) -> np.ndarray:
        """Milliseconds interpolated over axes `axis`.. at the cell whose earlier indices are `cell`."""
        if axis == len(index):
            return self._ms[cell]
        low = self._blend(axis + 1, (*cell, index[axis]), index, weight)
        if len(self._x[axis]) == 1:
            return low
        high = self._blend(axis + 1, (*cell, index[axis] + 1), index, weight)
        w = weight[axis]
        if self._power[axis]:
            return np.exp2((1 - w) * np.log2(low) + w * np.log2(high))
        return low + w * (high - low)

    def at(self, *sizes: float) -> float:
        """`seconds` at one point, in Python floats."""
        index: list[int] = []
        weight: list[float] = []
        clamped: list[float] = []
        above = False
        for size, axis, x, power in zip(sizes, self._axis_lists, self._x_lists, self._power, strict=True):
            inside = min(max(float(size), axis[0]), axis[-1])
            above = above or size > axis[-1]
            clamped.append(inside)
            if len(x) == 1:
                index.append(0)
                weight.append(0.0)
                continue
            c = math.log2(inside) if power else inside
            i = min(max(bisect.bisect_right(x, c) - 1, 0), len(x) - 2)
            index.append(i)
            weight.append((c - x[i]) / (x[i + 1] - x[i]))
        seconds = self._blend_at(0, 0, index, weight) / 1e3
        if above:
            ratio = float(self._sol([float(s) for s in sizes])) / float(self._sol(clamped))
            return float(scale(seconds, self.floor, ratio))
        return seconds

    def _blend_at(self, axis: int, offset: int, index: list[int], weight: list[float]) -> float:
        if axis == len(index):
            return self._flat[offset]
        stride = self._strides[axis]
        low = self._blend_at(axis + 1, offset + index[axis] * stride, index, weight)
        if len(self._x_lists[axis]) == 1:
            return low
        high = self._blend_at(axis + 1, offset + (index[axis] + 1) * stride, index, weight)
        w = weight[axis]
        if self._power[axis]:
            return low ** (1 - w) * high**w
        return low + w * (high - low)

    @property
    def floor(self) -> float:
        """The slice's fixed cost in seconds."""
        return self.floor_ms / 1e3
