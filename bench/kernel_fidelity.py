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

import numpy as np

from aisim.engine.costmodel.kernels import SYSTEM_NAMES, KernelTables, ScaledTables
from aisim.engine.costmodel.kernels.build import SPECS
from aisim.engine.costmodel.kernels.holdout import (
    gpu_errors,
    grid_errors,
    shape_errors,
    summary,
)
from aisim.engine.costmodel.kernels.tables import system_spec

GPU_PAIRS = (("h200_sxm", "h100_sxm"), ("h100_sxm", "h200_sxm"), ("b300_sxm", "b200_sxm"), ("gb200", "b200_sxm"),
             ("gb300", "b300_sxm"), ("b200_sxm", "h200_sxm"), ("l40s", "a100_sxm"), ("a100_sxm", "l40s"),
             ("rtx_pro_6000_server", "l40s"))
"""(target, base): the target priced from the base's tables as a GPU without tables would be."""


def line(label: str, name: str, errors: list[np.ndarray]) -> str:
    count, median, p90, signed = summary(errors)
    return f"{label:20s} {name:21s} {count:7d} {median * 100:7.1f}% {p90 * 100:7.1f}% {signed * 100:+7.1f}%"


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
                        print(line(f"{target} <- {base}", name, errors))
        else:
            for system in args.systems:
                for name in args.tables:
                    table = loaded[system].table(name)
                    if table is None:
                        continue
                    power = None if args.space is None else [args.space == "log"] * len(table.spec.axes)
                    errors = (list(shape_errors(table, args.slices)) if part == "shape"
                              else list(grid_errors(table, args.slices, part == "edge", power)))
                    overall += errors
                    if errors:
                        print(line(system, name, errors))
        print(line("all", "", overall))
    return 0


if __name__ == "__main__":
    sys.exit(main())
