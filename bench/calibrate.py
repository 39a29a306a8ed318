"""Fit the cost model's constants per GPU type on the Argonne vLLM runs; reproduce calibrated.json.

For each GPU type in the data (A100-40GB, H100-SXM) it searches the four constants of
`aisim.engine.costmodel.Efficiency` (bandwidth efficiency, MFU, step overhead, per-request
overhead) that minimise the mean squared log error of the simulated batch latency over that
GPU's rows, replaying each row through the real simulator (Nelder-Mead from scipy). It prints the
fitted constants beside the stored ones; `--write` stores them in `aisim/engine/calibrated.json`,
which the engine loads.

    pip install scipy && python bench/calibrate.py [--write] [--holdout llama-3-8b]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import numpy as np
from argonne import Row, rows, simulated_latency
from scipy.optimize import minimize

from aisim.engine import calibration
from aisim.engine.costmodel import Efficiency
from aisim.replay.fitting import decode, encode

STORE = Path(calibration.__file__).with_name("calibrated.json")


def loss(x: np.ndarray, data: list[Row]) -> float:
    efficiency = decode(x)
    return sum(math.log(simulated_latency(r, efficiency) / r.latency) ** 2 for r in data) / len(data)


def errors(data: list[Row], efficiency: Efficiency) -> list[float]:
    return [abs(simulated_latency(r, efficiency) - r.latency) / r.latency * 100 for r in data]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store the fitted constants in calibrated.json")
    parser.add_argument("--holdout", metavar="FAMILY", help="fit without this model family's rows and report the "
                        "error on them (out-of-sample check), e.g. llama-3-8b")
    args = parser.parse_args()
    by_gpu: dict[str, list[Row]] = {}
    held: dict[str, list[Row]] = {}
    for row in rows():
        (held if row.family == args.holdout else by_gpu).setdefault(row.gpu, []).append(row)
    fitted: dict[str, dict[str, object]] = {}
    for gpu, data in by_gpu.items():
        start = calibration.FITTED.get(gpu, calibration.DEFAULT)
        result = minimize(loss, encode(start), args=(data,), method="Nelder-Mead",
                          options={"xatol": 1e-3, "fatol": 1e-7, "maxiter": 600})
        best = decode(result.x)
        found = errors(data, best)
        stored = errors(data, start)
        print(f"{gpu}: {best}")
        print(f"  fitted: median |error| {statistics.median(found):.2f} %, max {max(found):.2f} % "
              f"({result.nfev} evaluations)")
        print(f"  stored: {start}")
        print(f"  stored: median |error| {statistics.median(stored):.2f} %, max {max(stored):.2f} %")
        if held.get(gpu):
            unseen = errors(held[gpu], best)
            print(f"  held-out {args.holdout}: median |error| {statistics.median(unseen):.2f} %, max {max(unseen):.2f} % "
                  f"({len(unseen)} rows not used in the fit)")
        fitted[gpu] = {
            "bandwidth": round(best.bandwidth, 4), "mfu": round(best.mfu, 4),
            "step_overhead_ns": best.step_overhead_ns, "per_request_ns": best.per_request_ns,
            "rows": len(data), "median_abs_error_pct": round(statistics.median(found), 2),
            "max_abs_error_pct": round(max(found), 2),
        }
    if args.write and not args.holdout:
        document = {"source": "bench/data/argonne-vllm-calibration.csv (see bench/argonne.py for the assumptions)",
                    "command": "python bench/calibrate.py --write", "gpus": fitted}
        STORE.write_text(json.dumps(document, indent=2) + "\n")
        print(f"wrote {STORE}")


if __name__ == "__main__":
    main()
