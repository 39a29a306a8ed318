"""How well the kernel tables answer what they did not measure, on rows held back from them.

    python bench/kernel_fidelity.py                       # every part, every system
    python bench/kernel_fidelity.py --part grid --systems h100_sxm b200_sxm
    python bench/kernel_fidelity.py --part grid --space log    # every axis a power law (lin: every axis affine)

Parts (error = predicted / measured - 1, over the held-back measured cells; median and p90 of |error| and
the signed median):

- `grid`: within a slice, every other interior point along one axis at a time is held back, the slice is
  rebuilt without them and the interpolation answers for them. The gap it crosses is twice the table's
  spacing, so this overstates the error of the packaged table;
- `edge`: the largest point along each axis held back: the roofline rule beyond the measured range;
- `shape`: whole shapes held back (one attention slice; every slice of one MoE model shape, all its TP and
  EP sizes; one all-reduce GPU count), answered by their neighbours' efficiency;
- `gpu`: a measured system priced as if it had no tables, from another system's through the no-table rule
  (`ScaledTables` with the target's datasheet numbers), against its own tables.

Compared with the packaged latencies as measured. Deterministic; at most
`--slices` slices per table are used (evenly spaced), every slice with `--slices 0`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence

import numpy as np

from aisim.engine.costmodel.kernels import (
    SYSTEM_NAMES,
    KernelTables,
    MissingKernel,
    ScaledTables,
)
from aisim.engine.costmodel.kernels.build import SPECS
from aisim.engine.costmodel.kernels.tables import Table, system_spec

GPU_PAIRS = (("h200_sxm", "h100_sxm"), ("h100_sxm", "h200_sxm"), ("b300_sxm", "b200_sxm"), ("gb200", "b200_sxm"),
             ("gb300", "b300_sxm"), ("b200_sxm", "h200_sxm"), ("l40s", "a100_sxm"), ("a100_sxm", "l40s"),
             ("rtx_pro_6000_server", "l40s"))
"""(target, base): the target priced from the base's tables as a GPU without tables would be."""
MODEL_SHAPE = {"moe": ("dtype", "distribution", "topk", "experts", "hidden", "inter")}
"""Keys that name one held-back shape; tables not listed hold back one slice at a time."""


def _chosen(count: int, limit: int) -> list[int]:
    if limit <= 0 or count <= limit:
        return list(range(count))
    return sorted({int(i) for i in np.linspace(0, count - 1, limit)})


def _cells(values: np.ndarray, axes: Sequence[np.ndarray], mask: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    where = np.nonzero(mask & ~np.isnan(values))
    return [axis[i].astype(np.float64) for axis, i in zip(axes, where, strict=True)], np.exp2(values[where]) / 1e3


def grid_errors(table: Table, limit: int, edge: bool, space: str | None) -> Iterator[np.ndarray]:
    power = None if space is None else [space == "log"] * len(table.spec.axes)
    for index in _chosen(len(table.slices), limit):
        raw = table.measured(index)
        for axis in range(raw.ndim):
            others = tuple(j for j in range(raw.ndim) if j != axis)
            present = np.flatnonzero(~np.isnan(raw).all(axis=others))
            held = present[-1:] if edge else present[1:-1:2]
            if len(present) < 3 or not len(held):
                continue
            mask = np.zeros(raw.shape, bool)
            mask[(slice(None),) * axis + (held,)] = True
            kept = np.where(mask, np.nan, raw)
            coords, measured = _cells(raw, table.axes, mask)
            if not len(measured):
                continue
            yield table.make_grid(index, kept, power).seconds(*coords) / measured - 1


def shape_errors(table: Table, limit: int) -> Iterator[np.ndarray]:
    numeric = [k for k in table.spec.keys if k not in table.spec.categorical]
    if not numeric:
        return
    shape_keys = MODEL_SHAPE.get(table.spec.name, table.spec.keys)
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, keys in enumerate(table.slices):
        groups.setdefault(tuple(keys[k] for k in shape_keys), []).append(i)
    members = list(groups.values())
    for group in (members[i] for i in _chosen(len(members), limit)):
        excluded = frozenset(group)
        for index in group:
            coords, measured = _cells(table.measured(index), table.axes, np.ones(table.measured(index).shape, bool))
            try:
                yield table.seconds(table.slices[index], coords, exclude=excluded) / measured - 1
            except MissingKernel:
                continue


def gpu_errors(target: KernelTables, scaled: ScaledTables, name: str, limit: int) -> Iterator[np.ndarray]:
    table = target.table(name)
    if table is None or scaled.base.table(name) is None:
        return
    for index in _chosen(len(table.slices), limit):
        keys = table.slices[index]
        if not scaled.base.table(name).matches(keys):  # type: ignore[union-attr]
            continue
        coords, measured = _cells(table.measured(index), table.axes, np.ones(table.measured(index).shape, bool))
        yield scaled._seconds(name, keys, coords) / measured - 1


def summary(errors: list[np.ndarray]) -> str:
    if not errors:
        return f"{0:7d} {'':>8s} {'':>8s} {'':>8s}"
    e = np.concatenate(errors)
    return (f"{len(e):7d} {np.median(np.abs(e)) * 100:7.1f}% {np.quantile(np.abs(e), 0.9) * 100:7.1f}% "
            f"{np.median(e) * 100:+7.1f}%")


HEADER = f"{'system':20s} {'table':21s} {'cells':>7s} {'median':>8s} {'p90':>8s} {'signed':>8s}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("grid", "edge", "shape", "gpu"), action="append")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEM_NAMES))
    parser.add_argument("--tables", nargs="+", default=list(SPECS))
    parser.add_argument("--slices", type=int, default=40, help="slices per table at most (0: all)")
    parser.add_argument("--space", choices=("lin", "log"),
                        help="every axis affine (lin) or a power law (log), instead of the tables' rule")
    args = parser.parse_args()
    parts = args.part or ["grid", "edge", "shape", "gpu"]
    loaded = {s: KernelTables.load(s) for s in SYSTEM_NAMES}
    for part in parts:
        print(f"\n== {part}\n{HEADER}")
        overall: list[np.ndarray] = []
        if part == "gpu":
            for target, base in GPU_PAIRS:
                if target not in args.systems:
                    continue
                scaled = ScaledTables(loaded[base], system_spec(target), target)
                for name in args.tables:
                    errors = list(gpu_errors(loaded[target], scaled, name, args.slices))
                    overall += errors
                    if errors:
                        print(f"{target + ' <- ' + base:20s} {name:21s} {summary(errors)}")
        else:
            for system in args.systems:
                for name in args.tables:
                    table = loaded[system].table(name)
                    if table is None:
                        continue
                    errors = (list(shape_errors(table, args.slices)) if part == "shape"
                              else list(grid_errors(table, args.slices, part == "edge", args.space)))
                    overall += errors
                    if errors:
                        print(f"{system:20s} {name:21s} {summary(errors)}")
        print(f"{'all':20s} {'':21s} {summary(overall)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
