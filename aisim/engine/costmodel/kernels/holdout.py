"""Measured rows held back from the tables and predicted without them (`bench/kernel_fidelity.py`, tests).

Each generator yields arrays of relative errors, predicted / measured - 1, against the packaged latencies
as measured:

- `grid_errors`: within a slice, every other interior point along one axis at a time held back (or, with
  `edge`, the largest), the slice rebuilt without them. The gap crossed is twice the table's spacing, so
  this overstates the packaged table's own interpolation error;
- `shape_errors`: whole shapes held back (one attention slice; every slice of an MoE model shape, all its
  TP and EP sizes; one all-reduce GPU count), answered by their neighbours (`Table.seconds`);
- `gpu_errors`: one system's slices priced from another system's tables by the rule for GPUs without tables.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from .tables import KernelTables, MissingKernel, ScaledTables, Table

MODEL_SHAPE = {"moe": ("dtype", "distribution", "topk", "experts", "hidden", "inter")}
"""Keys naming one held-back shape; a table not listed holds back one slice at a time."""


def chosen(count: int, limit: int) -> list[int]:
    """At most `limit` of `count` indices, evenly spaced (all of them when `limit` is 0)."""
    if limit <= 0 or count <= limit:
        return list(range(count))
    return sorted({int(i) for i in np.linspace(0, count - 1, limit)})


def cells(values: np.ndarray, axes: Sequence[np.ndarray], mask: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """(sizes per axis, seconds) of the measured cells of `values` (log2 ms) under `mask`."""
    where = np.nonzero(mask & ~np.isnan(values))
    return [axis[i].astype(np.float64) for axis, i in zip(axes, where, strict=True)], np.exp2(values[where]) / 1e3


def grid_errors(table: Table, limit: int = 0, edge: bool = False,
                power_law: Sequence[bool] | None = None) -> Iterator[np.ndarray]:
    for index in chosen(len(table.slices), limit):
        raw = table.measured(index)
        for axis in range(raw.ndim):
            others = tuple(j for j in range(raw.ndim) if j != axis)
            present = np.flatnonzero(~np.isnan(raw).all(axis=others))
            held = present[-1:] if edge else present[1:-1:2]
            if len(present) < 3 or not len(held):
                continue
            mask = np.zeros(raw.shape, bool)
            mask[(slice(None),) * axis + (held,)] = True
            sizes, measured = cells(raw, table.axes, mask)
            if len(measured):
                grid = table.make_grid(index, np.where(mask, np.nan, raw), power_law)
                yield np.asarray(grid.seconds(*sizes)) / measured - 1


def shape_errors(table: Table, limit: int = 0) -> Iterator[np.ndarray]:
    if all(k in table.spec.categorical for k in table.spec.keys):
        return
    shape_keys = MODEL_SHAPE.get(table.spec.name, table.spec.keys)
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, keys in enumerate(table.slices):
        groups.setdefault(tuple(keys[k] for k in shape_keys), []).append(i)
    members = list(groups.values())
    for group in (members[i] for i in chosen(len(members), limit)):
        for index in group:
            raw = table.measured(index)
            sizes, measured = cells(raw, table.axes, np.ones(raw.shape, bool))
            try:
                yield np.asarray(table.seconds(table.slices[index], sizes, exclude=frozenset(group))) / measured - 1
            except MissingKernel:
                continue


def gpu_errors(target: KernelTables, scaled: ScaledTables, name: str, limit: int = 0) -> Iterator[np.ndarray]:
    table, base = target.table(name), scaled.base.table(name)
    if table is None or base is None:
        return
    for index in chosen(len(table.slices), limit):
        keys = table.slices[index]
        if base.matches(keys):
            raw = table.measured(index)
            sizes, measured = cells(raw, table.axes, np.ones(raw.shape, bool))
            yield np.asarray(scaled.lookup(name, keys, sizes)) / measured - 1


def summary(errors: Sequence[np.ndarray]) -> tuple[int, float, float, float]:
    """(cells, median |error|, p90 |error|, signed median)."""
    if not errors:
        return 0, float("nan"), float("nan"), float("nan")
    e = np.concatenate(errors)
    return len(e), float(np.median(np.abs(e))), float(np.quantile(np.abs(e), 0.9)), float(np.median(e))
