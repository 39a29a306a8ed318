"""Regenerate every fitted constant of the cost model from the shared data; reproduce calibrated.json.

1. Operator curves, per profiled GPU (H100-SXM, A100-80GB): the GEMM curve and the element-wise
   curves on the Vidur operator profiles (`bench/vidur.py`, bench/data/vidur/).
2. All-reduce tables, per profiled GPU, node type and worker count: the NCCL profiles, binned by
   size and made monotone.
3. Engine constants, per GPU of the Argonne rows (A100-40GB, H100-SXM): CPU time per step and per
   scheduled request, and the decode-attention bandwidth share, by Nelder-Mead on the mean squared
   log error of the whole-batch latency, replaying each row through the real simulator with the
   operator curves of 1. held fixed. The search starts from fixed values, so the result depends
   on the data only.

It prints the fitted constants and their errors; `--write` stores them in
`aisim/engine/calibrated.json`, which the engine loads. `--holdout FAMILY` fits step 3 without
that model's rows and reports the error on them.

    pip install scipy && python bench/calibrate.py [--write] [--holdout llama-3-8b]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import vidur
from argonne import Row, rows, simulated_latency
from scipy.optimize import minimize

from aisim.engine import calibration

STORE = Path(calibration.__file__).with_name("calibrated.json")
START = np.array([math.log(2000.0), math.log(50.0), 1.0])
"""Search start: 2 ms per step, 50 us per request, a decode-attention share of 0.73 (logit 1)."""
SIMPLEX = np.vstack([START, START + np.diag([0.5, 1.0, 1.0])])
"""The search's first simplex: steps of a size the loss notices in every direction (scipy's default
step of 5 % of each entry is too small to leave a flat start)."""


def operator_constants() -> dict[str, Any]:
    """Step 1: {gpu: {"gemm": {...}, "elementwise": {class: [floor, per element]}}}."""
    every = vidur.operator_rows()
    out: dict[str, Any] = {}
    for gpu in sorted({r.gpu for r in every}):
        fitted = vidur.fit_operators([r for r in every if r.gpu == gpu])
        gemm = fitted["gemm"]
        elementwise = fitted["elementwise"]
        assert isinstance(elementwise, dict)
        out[gpu] = {"gemm": {k: float(f"{v:.6g}") for k, v in dataclasses.asdict(gemm).items()},  # type: ignore[call-overload]
                    "elementwise": {k: [float(f"{a:.6g}"), float(f"{b:.6g}")] for k, (a, b) in elementwise.items()}}
    return out


def engine_of(x: np.ndarray) -> tuple[float, float, float]:
    """Search vector -> (step overhead ns, per-request ns, decode-attention bandwidth share)."""
    return round(math.exp(x[0]) * 1000), round(math.exp(x[1]) * 1000), round(1 / (1 + math.exp(-x[2])), 4)


def loss(x: np.ndarray, gpu: str, data: list[Row]) -> float:
    calibration.with_engine(gpu, *engine_of(x))
    return sum(math.log(simulated_latency(r) / r.latency) ** 2 for r in data) / len(data)


def errors(data: list[Row]) -> list[float]:
    return [abs(simulated_latency(r) - r.latency) / r.latency * 100 for r in data]


def fit_engine(gpu: str, data: list[Row]) -> tuple[tuple[float, float, float], int]:
    """Step 3 for one GPU: the engine constants and the evaluations the search took."""
    result = minimize(loss, START, args=(gpu, data), method="Nelder-Mead",
                      options={"xatol": 1e-3, "fatol": 1e-7, "maxiter": 400, "initial_simplex": SIMPLEX})
    best = engine_of(result.x)
    calibration.with_engine(gpu, *best)
    return best, int(result.nfev)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store the fitted constants in calibrated.json")
    parser.add_argument("--holdout", metavar="FAMILY", help="fit the engine constants without this model family's "
                        "rows and report the error on them (out-of-sample check), e.g. llama-3-8b")
    args = parser.parse_args()
    document: dict[str, Any] = {
        "source": "bench/data/vidur (operators, all-reduce) and bench/data/argonne-vllm-calibration.csv (engine); "
                  "see bench/calibrate.py",
        "command": "python bench/calibrate.py --write",
        "operators": operator_constants(),
        "allreduce": vidur.allreduce_tables(),
        "allreduce_latency": vidur.allreduce_device_latency(),
        "engine": {},
    }
    by_gpu: dict[str, list[Row]] = {}
    held: dict[str, list[Row]] = {}
    for row in rows():
        (held if row.family == args.holdout else by_gpu).setdefault(row.gpu, []).append(row)
    for gpu in by_gpu:
        document["engine"][gpu] = dict(zip(("step_overhead_ns", "per_request_ns", "kv_bandwidth_share"), engine_of(START)))
    calibration.replace_document(document)
    for gpu, data in sorted(by_gpu.items()):
        (step, request, share), evaluations = fit_engine(gpu, data)
        found = errors(data)
        print(f"{gpu}: step overhead {step / 1e3:.0f} us, per request {request / 1e3:.1f} us, "
              f"decode-attention bandwidth share {share:.3f} ({evaluations} evaluations)")
        print(f"  in sample: median |error| {statistics.median(found):.2f} %, max {max(found):.2f} % ({len(data)} rows)")
        if held.get(gpu):
            unseen = errors(held[gpu])
            print(f"  held-out {args.holdout}: median |error| {statistics.median(unseen):.2f} %, max {max(unseen):.2f} % "
                  f"({len(unseen)} rows not used in the fit)")
        document["engine"][gpu] = {"step_overhead_ns": step, "per_request_ns": request, "kv_bandwidth_share": share,
                                   "rows": len(data), "median_abs_error_pct": round(statistics.median(found), 2),
                                   "max_abs_error_pct": round(max(found), 2)}
    for gpu, fitted in document["operators"].items():
        print(f"{gpu} operators: {fitted['gemm']}")
    if args.write and not args.holdout:
        STORE.write_text(json.dumps(document, indent=1) + "\n")
        print(f"wrote {STORE}")


if __name__ == "__main__":
    main()
