"""The Vidur operator and collective profiles (bench/data/vidur/), and the operator curves fitted on them.

`python bench/vidur.py --extract /work/shared/data/vidur-profiling` rebuilds the compact copies in
bench/data/vidur/ from the original profiles (median of each operator per shape, duplicate rows
merged by their median; all-reduce medians over ranks, of the rows whose workers share one node). Everything else here reads those copies:

- `operator_rows()`: one row per (GPU, model, TP degree, tokens, operator) with its shape;
- `fit_gemm(rows)`: the GEMM curve of `aisim.engine.costmodel.operators.gemm_s` (five constants
  per GPU) by robust least squares on the log of the time;
- `fit_elementwise(rows)`: a floor plus a per-element time for each element-wise operator class;
- `allreduce_tables()`: per (GPU, node type, workers) a monotone table of time over message size.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from aisim.engine.costmodel.collectives import DEVICE_FLOOR_MAX_BYTES
from aisim.engine.costmodel.operators import (
    ELEMENTWISE,
    GEMMS,
    GemmCurve,
    elementwise_s,
    gemm_s,
)

DATA = Path(__file__).resolve().parent / "data" / "vidur"
OPERATORS = DATA / "operators.csv.gz"
ALLREDUCE = DATA / "allreduce.csv.gz"
PROFILED = {"h100": "H100-SXM", "a100": "A100-80GB"}
"""Vidur's device names ("H100 DGX", "A100 80GB DGX") and the aisim presets they are."""
MIN_SAMPLES = 5
"""Fewest message sizes one all-reduce table point is the median of (the small sizes are sampled
sparsely and their times are noisy: a single sample is not a measurement of the latency floor)."""
TOPOLOGIES = {"dgx": "nvswitch", "pairwise_nvlink": "pairwise"}
SHAPE = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp")
OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
       "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")


@dataclass(frozen=True)
class OpRow:
    """One profiled operator: its GPU, model, TP degree, shape and median time (seconds)."""

    gpu: str
    model: str
    tp: int
    op: str
    tokens: int
    m: float
    n: float
    k: float
    seconds: float


def extract(source: Path) -> None:
    """Write the compact copies of the profiles in `source` (the shared vidur-profiling folder)."""
    DATA.mkdir(parents=True, exist_ok=True)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(("gpu", "model", *SHAPE, "tokens", "tp", *OPS))
    for path in sorted(source.glob("compute/*/*/*/mlp.csv")):
        gpu, model = path.parts[-4], path.parts[-2]
        groups: dict[tuple[str, ...], list[dict[str, str]]] = defaultdict(list)
        with path.open(newline="") as handle:
            for r in csv.DictReader(handle):
                groups[(*(r[c] for c in SHAPE), r["num_tokens"], r["num_tensor_parallel_workers"])].append(r)
        for key in sorted(groups, key=lambda k: (int(k[-1]), int(k[-2]))):
            rows = groups[key]
            times = []
            for op in OPS:
                values = [float(r[f"time_stats.{op}.median"]) for r in rows if r.get(f"time_stats.{op}.median")]
                times.append(f"{statistics.median(values):.6g}" if values else "")
            writer.writerow((PROFILED[gpu], model, *key, *times))
    OPERATORS.write_bytes(gzip.compress(out.getvalue().encode(), mtime=0))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(("gpu", "topology", "workers", "bytes", "ms"))
    for path in sorted(source.glob("network/*/all_reduce.csv")):
        gpu, topology = path.parent.name.split("_", 1)
        samples: dict[tuple[int, int], list[float]] = defaultdict(list)
        with path.open(newline="") as f:
            for r in csv.DictReader(f):
                if r["devices_per_node"] != r["num_workers"]:
                    continue  # workers spread over nodes (A100: 2 on 2 nodes, 8 on 2): tensor parallelism is in one node
                samples[(int(r["num_workers"]), int(r["size"]))].append(float(r["time_stats.all_reduce.median"]))
        for (workers, size), values in sorted(samples.items()):
            writer.writerow((PROFILED[gpu], TOPOLOGIES[topology], workers, size, f"{statistics.median(values):.6g}"))
    ALLREDUCE.write_bytes(gzip.compress(out.getvalue().encode(), mtime=0))


def _profiles() -> Iterable[dict[str, str]]:
    with gzip.open(OPERATORS, "rt", newline="") as handle:
        yield from csv.DictReader(handle)


def operator_rows() -> list[OpRow]:
    """Every profiled operator time with the shape `aisim.engine.costmodel.operators` gives it."""
    rows = []
    for r in _profiles():
        heads, kv_heads, hidden, inter = (int(r[c]) for c in SHAPE[:4])
        gated, tokens, tp = r["use_gated_mlp"] == "True", int(r["tokens"]), int(r["tp"])
        head_dim = hidden // heads
        gemms = {
            "attn_pre_proj": (hidden, (heads + 2 * kv_heads) * head_dim / tp),
            "attn_post_proj": (heads * head_dim / tp, hidden),
            "mlp_up_proj": (hidden, (2 if gated else 1) * inter / tp),
            "mlp_down_proj": (inter / tp, hidden),
        }
        widths = {"emb": hidden, "input_layernorm": hidden, "post_attention_layernorm": hidden, "add": hidden,
                  "attn_rope": (heads + kv_heads) * head_dim / tp, "mlp_act": inter / tp}
        for op in OPS:
            if not r[op]:
                continue
            seconds = float(r[op]) / 1e3
            if op in gemms:
                k, n = gemms[op]
                rows.append(OpRow(r["gpu"], r["model"], tp, op, tokens, tokens, n, k, seconds))
            else:
                rows.append(OpRow(r["gpu"], r["model"], tp, op, tokens, tokens * widths[op], 0.0, 0.0, seconds))
    return rows


def fit_gemm(rows: list[OpRow]) -> GemmCurve:
    """The GEMM curve of one GPU over its linear-operator rows (soft-L1 loss on log time)."""
    m = np.array([r.m for r in rows])
    n = np.array([r.n for r in rows])
    k = np.array([r.k for r in rows])
    t = np.array([r.seconds for r in rows])

    def curve(x: np.ndarray) -> GemmCurve:
        return GemmCurve(float(math.exp(x[0])), float(math.exp(x[1])), float(math.exp(x[2])), float(math.exp(x[3])),
                         1 + float(math.exp(x[4])))

    result = least_squares(lambda x: np.log(gemm_s(curve(x), m, n, k) / t), np.log([5e-6, 2e12, 4e14, 30, 1.0]),
                           loss="soft_l1", f_scale=0.1)
    return curve(result.x)


def fit_elementwise(rows: list[OpRow]) -> tuple[float, float]:
    """(floor s, s per element) of one element-wise operator class on one GPU."""
    x = np.array([r.m for r in rows])
    t = np.array([r.seconds for r in rows])
    result = least_squares(lambda p: np.log(elementwise_s((math.exp(p[0]), math.exp(p[1])), x) / t),
                           np.log([3e-6, 1e-12]), loss="soft_l1", f_scale=0.1)
    return float(math.exp(result.x[0])), float(math.exp(result.x[1]))


def fit_operators(rows: list[OpRow]) -> dict[str, object]:
    """All operator constants of one GPU: the GEMM curve and one (floor, per element) per operator class."""
    return {
        "gemm": fit_gemm([r for r in rows if r.op in GEMMS]),
        "elementwise": {cls: fit_elementwise([r for r in rows if ELEMENTWISE.get(r.op) == cls])
                        for cls in sorted(set(ELEMENTWISE.values()))},
    }


def predict(constants: dict[str, object], rows: list[OpRow]) -> np.ndarray:
    """The fitted curves' time for each row (seconds)."""
    gemm = constants["gemm"]
    elementwise = constants["elementwise"]
    assert isinstance(gemm, GemmCurve) and isinstance(elementwise, dict)
    out = np.empty(len(rows))
    for i, r in enumerate(rows):
        out[i] = (float(gemm_s(gemm, r.m, r.n, r.k)) if r.op in GEMMS
                  else float(elementwise_s(elementwise[ELEMENTWISE[r.op]], r.m)))
    return out


def isotonic(values: list[float]) -> list[float]:
    """The closest non-decreasing sequence (pool-adjacent-violators), so that a bigger message never
    takes less time than a smaller one in the interpolated table (the raw medians are noisy)."""
    blocks: list[list[float]] = []  # [mean, weight]
    for v in values:
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean, weight = blocks.pop()
            blocks[-1] = [(blocks[-1][0] * blocks[-1][1] + mean * weight) / (blocks[-1][1] + weight),
                          blocks[-1][1] + weight]
    return [mean for mean, weight in blocks for _ in range(int(weight))]


def allreduce_tables(points: int = 24) -> dict[str, dict[str, dict[str, list[list[float]]]]]:
    """gpu -> topology -> workers -> [[bytes, seconds], ...]: medians in log-spaced size bins (each of at
    least `MIN_SAMPLES` sizes), made monotone."""
    raw: dict[tuple[str, str, str], list[tuple[int, float]]] = defaultdict(list)
    with gzip.open(ALLREDUCE, "rt", newline="") as handle:
        for r in csv.DictReader(handle):
            raw[(r["gpu"], r["topology"], r["workers"])].append((int(r["bytes"]), float(r["ms"]) / 1e3))
    tables: dict[str, dict[str, dict[str, list[list[float]]]]] = {}
    for (gpu, topology, workers), samples in sorted(raw.items()):
        samples.sort()
        sizes = np.array([s for s, _ in samples], dtype=float)
        edges = np.geomspace(sizes.min(), sizes.max() * 1.0001, points + 1)
        bins = np.searchsorted(edges, sizes, side="right")
        centres, medians = [], []
        group: list[tuple[int, float]] = []
        for index, sample in enumerate(samples):
            group.append(sample)
            last = index == len(samples) - 1
            if last or (bins[index + 1] != bins[index] and len(group) >= MIN_SAMPLES):
                centres.append(float(statistics.median(s for s, _ in group)))
                medians.append(float(statistics.median(t for _, t in group)))
                group = []
        monotone = isotonic(medians)
        tables.setdefault(gpu, {}).setdefault(topology, {})[workers] = [
            [round(s), float(f"{t:.4g}")] for s, t in zip(centres, monotone)]
    return tables


def allreduce_device_latency() -> dict[str, float]:
    """gpu -> seconds: the smallest median all-reduce time at <= 64 KiB over all its node types and
    worker counts, the kernel when no rank waits on a late host launch (`costmodel/collectives.py`)."""
    floors: dict[str, float] = {}
    with gzip.open(ALLREDUCE, "rt", newline="") as handle:
        for r in csv.DictReader(handle):
            if int(r["bytes"]) <= DEVICE_FLOOR_MAX_BYTES:
                seconds = float(r["ms"]) / 1e3
                floors[r["gpu"]] = min(floors.get(r["gpu"], seconds), seconds)
    return {gpu: float(f"{t:.4g}") for gpu, t in sorted(floors.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extract", type=Path, metavar="DIR", help="rebuild bench/data/vidur from the shared profiles")
    args = parser.parse_args()
    if args.extract:
        extract(args.extract)
        print(f"wrote {OPERATORS} and {ALLREDUCE}")


if __name__ == "__main__":
    main()
