"""Package AIConfigurator's vLLM kernel tables into aisim, or print what is packaged.

    python bench/kernel_tables.py --extract /work/shared/data/aiconfigurator-vllm   # rewrite the data folder
    python bench/kernel_tables.py --check /work/shared/data/aiconfigurator-vllm     # packaged == source, to 1.7e-4
    python bench/kernel_tables.py --fixture /work/shared/data/aiconfigurator-vllm   # the tests' source rows
    python bench/kernel_tables.py                                                   # the manifest and load times

Version: per system, the newest vLLM version folder that holds measured tables (`reuse.yaml`-only folders do
not count): what AIConfigurator's `get_latest_database_version` picks for the vLLM backend by default. A table
that version lacks comes from the newest older version that has it (l40s's all-reduce: 0.22.0). Reading the
parquet files needs pyarrow (a tool dependency here, not aisim's); the packaged files need only numpy.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from aisim.engine.costmodel.kernels import (
    MEASURED,
    SYSTEM_NAMES,
    KernelTables,
    coverage,
    for_gpu,
    manifest_text,
    store,
)
from aisim.engine.costmodel.kernels.build import (
    SPECS,
    TableSpec,
    build,
    first_rows,
    select,
)
from aisim.engine.costmodel.kernels.store import DATA, MANIFEST
from aisim.scenario.presets import GPU_PROFILES

SOURCE_COMMIT = "095f58a51"
SPEC_FIELDS = {"gpu": ("mem_bw", "mem_capacity", "bfloat16_tc_flops", "fp8_tc_flops", "fp4_tc_flops", "int8_tc_flops",
                       "sm_version"),
               "node": ("num_gpus_per_node", "intra_node_bw", "inter_node_bw", "pcie_bw")}


def _version_key(version: str) -> tuple[int, ...]:
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(x) for x in found.groups()) if found else (0, 0, 0)


def _versions(folder: Path) -> list[str]:
    """Version folders with measured tables, newest first (a folder holding only `reuse.yaml` does not count)."""
    if not folder.is_dir():
        return []
    found = [v.name for v in folder.iterdir() if v.is_dir() and any(v.glob("*.parquet"))]
    return sorted(found, key=_version_key, reverse=True)


def default_version(ops: Path) -> str:
    return max((v for op in ops.iterdir() for v in _versions(op / "vllm") if _version_key(v) > (0, 1, 0)),
               key=_version_key)


def table_version(ops: Path, spec: TableSpec, system_version: str) -> str | None:
    """The system's default version if it holds the table's files, else the newest older one that does."""
    for version in _versions(ops / spec.folder / "vllm"):
        if _version_key(version) <= _version_key(system_version) and all(
                (ops / spec.folder / "vllm" / version / f).exists() for f in spec.files):
            return version
    return None


def read_columns(paths: list[Path]) -> dict[str, np.ndarray]:
    """The rows of parquet files, concatenated in file order (columns a file lacks are left out)."""
    import pyarrow.parquet as pq

    tables = [pq.read_table(p) for p in paths]
    names = [n for n in tables[0].column_names if all(n in t.column_names for t in tables)]
    columns: dict[str, np.ndarray] = {}
    for name in names:
        parts = []
        for t in tables:
            column = t.column(name)
            kind = str(column.type)
            parts.append(np.asarray(column.to_pylist(), dtype=str) if "string" in kind else column.to_numpy())
        columns[name] = np.concatenate(parts)
    return columns


def system_spec(path: Path) -> dict[str, Any]:
    from ruamel.yaml import YAML

    document = YAML(typ="safe").load(path.read_text())
    spec = {f: document[part][f] for part, fields in SPEC_FIELDS.items() for f in fields if f in document.get(part, {})}
    return {k: (float(v) if isinstance(v, float | int) and k != "sm_version" else v) for k, v in spec.items()}


def extract(root: Path, out: Path = DATA) -> dict[str, Any]:
    """Rewrite the data folder from the shared data; returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    systems: dict[str, Any] = {}
    for system in SYSTEM_NAMES:
        ops = root / "ops" / system
        version = default_version(ops)
        arrays: dict[str, np.ndarray] = {}
        tables: dict[str, Any] = {}
        device = ""
        for spec in SPECS.values():
            found = table_version(ops, spec, version)
            if found is None:
                continue
            files = [ops / spec.folder / "vllm" / found / f for f in spec.files]
            columns = read_columns(files)
            device = device or str(columns["device"][0])
            built = build(spec, columns)
            arrays.update(built.arrays)
            tables[spec.name] = {"version": found, "files": [str(f.relative_to(root)) for f in files],
                                 "rows": built.rows, "kept": built.kept, "duplicates": built.duplicates,
                                 "slices": built.slices, "cells": built.cells, "zeros": built.zeros,
                                 "measured": built.kept - built.duplicates}
        path = out / f"{system}.npz"
        store.write(path, arrays)
        payload = path.read_bytes()
        systems[system] = {"device": device, "version": version, "file": path.name, "bytes": len(payload),
                           "sha256": hashlib.sha256(payload).hexdigest(),
                           "spec": system_spec(root / "systems" / f"{system}.yaml"), "tables": tables}
    manifest = {"format": 1, "source": {"repository": "ai-dynamo/aiconfigurator", "commit": SOURCE_COMMIT,
                                        "folder": "aic-core/src/aiconfigurator_core/systems"},
                "codes": {"log2_ms_floor": store.LOG2_MS_FLOOR, "codes_per_octave": store.CODES_PER_OCTAVE},
                "systems": systems}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    shutil.copyfile(root / "LICENSE-Apache-2.0.txt", out / "LICENSE-Apache-2.0.txt")
    return manifest


def check(root: Path) -> int:
    """Compare every packaged latency with its source row; prints the worst relative difference per system."""
    worst_all = 0.0
    manifest = json.loads((DATA / MANIFEST).read_text())
    for system, info in manifest["systems"].items():
        tables = KernelTables.load(system)
        worst = 0.0
        for name, table in info["tables"].items():
            spec = SPECS[name]
            derived, latency_ms = select(spec, read_columns([root / f for f in table["files"]]))
            first = first_rows(spec, derived)
            first = first[latency_ms[first] > 0]  # compute_scale's zero differences are stored as 1 ns
            packaged = tables.table(name)
            assert packaged is not None
            stored = packaged.stored({k: derived[k][first] for k in spec.keys}, [derived[a][first] for a in spec.axes])
            worst = max(worst, float(np.max(np.abs(stored * 1e3 / latency_ms[first] - 1))))
        print(f"{system:20s} worst relative difference {worst:.2e}")
        worst_all = max(worst_all, worst)
    return 0 if worst_all <= store.MAX_RELATIVE_ERROR * 1.0001 else 1


FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "data" / "kernel_tables"
FIXTURE_ROWS = 3
DROPPED = {"framework", "version", "device", "power", "power_limit", "model", "architecture"}


def fixture(root: Path, out: Path = FIXTURE) -> None:
    """A few source rows of every packaged table, as read from the parquet files (the tests' ground truth):
    per table, `FIXTURE_ROWS` rows of distinct shapes spread over the file."""
    manifest = json.loads((DATA / MANIFEST).read_text())
    document: dict[str, Any] = {"source": f"ai-dynamo/aiconfigurator @ {SOURCE_COMMIT} (Apache-2.0)", "tables": []}
    for system, info in manifest["systems"].items():
        for name, table in info["tables"].items():
            columns = read_columns([root / f for f in table["files"]])
            derived, latency = select(SPECS[name], columns)
            keep = np.isfinite(np.asarray(columns["latency"], np.float64))
            for accept in SPECS[name].filters:
                keep &= accept(columns)
            kept = np.flatnonzero(keep)
            shapes = first_rows(SPECS[name], derived)
            shapes = shapes[latency[shapes] > 0]
            rows = kept[shapes[np.unique(np.linspace(0, len(shapes) - 1, FIXTURE_ROWS).astype(int))]]
            document["tables"].append({"system": system, "table": name, "columns": {
                c: [v.item() if hasattr(v, "item") else v for v in np.asarray(columns[c])[rows]]
                for c in sorted(columns) if c not in DROPPED}})
    out.mkdir(parents=True, exist_ok=True)
    (out / "rows.json").write_text(json.dumps(document, indent=0, sort_keys=True) + "\n")
    shutil.copyfile(root / "LICENSE-Apache-2.0.txt", out / "LICENSE-Apache-2.0.txt")


def print_coverage() -> None:
    """The coverage matrix: per table and name, each system's and each GPU preset's source (M: measured here;
    M as X: this GPU's measurement of name X stands in; a system's name: scaled from its tables, with a name
    standing in after "as"; -: missing)."""
    gpus = {**{s: KernelTables.for_system(s) for s in SYSTEM_NAMES},
            **{name: for_gpu(name) for name in GPU_PROFILES if name not in MEASURED}}
    found = {gpu: coverage(tables) for gpu, tables in gpus.items()}
    print("| table | name | " + " | ".join(gpus) + " |")
    print("|---|---|" + "---|" * len(gpus))
    for table, name in next(iter(found.values())):
        cells = []
        for source in (found[gpu][table, name] for gpu in gpus):
            cells.append("M" if source == "measured" else "-" if source == "missing"
                         else f"M as {source.split()[-1]}" if source.startswith("measured as")
                         else source.removeprefix("scaled from "))
        print(f"| {table} | {name} | " + " | ".join(cells) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--extract", type=Path, metavar="ROOT", help="rewrite the packaged tables from ROOT")
    parser.add_argument("--check", type=Path, metavar="ROOT", help="compare the packaged tables with ROOT")
    parser.add_argument("--fixture", type=Path, metavar="ROOT", help="rewrite the tests' source rows from ROOT")
    parser.add_argument("--coverage", action="store_true", help="which kernels each GPU has: measured, scaled, missing")
    args = parser.parse_args()
    if args.extract:
        extract(args.extract)
    if args.fixture:
        fixture(args.fixture)
    if args.check:
        return check(args.check)
    if args.coverage:
        print_coverage()
        return 0
    print(manifest_text())
    total = sum(p.stat().st_size for p in DATA.iterdir())
    print(f"\npackaged: {total / 1e6:.2f} MB in {DATA}")
    print(f"{'system':20s} {'open':>8s} {'tables':>8s} {'grids':>8s}  (ms: open the file; decode every table; "
          f"make every slice's grid)")
    for system in SYSTEM_NAMES:
        started = time.perf_counter()
        tables = KernelTables.load(system)
        opened = time.perf_counter()
        decoded = [t for t in (tables.table(n) for n in SPECS) if t is not None]
        loaded = time.perf_counter()
        for table in decoded:
            for index in range(len(table.slices)):
                table.grid(index)
        done = time.perf_counter()
        print(f"{system:20s} {(opened - started) * 1e3:8.1f} {(loaded - opened) * 1e3:8.1f} {(done - loaded) * 1e3:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
