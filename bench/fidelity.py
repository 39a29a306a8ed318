"""How close the cost model is to measurements, in sample and out of sample.

1. Operators (Vidur profiles, bench/data/vidur/): median and p90 |error| of the fitted curves per
   operator class and GPU, in sample; then each model left out of the fit in turn (its operators
   predicted from its shapes alone), and each tensor-parallel degree left out in turn.
2. Argonne whole-batch latencies (bench/data/argonne-vllm-calibration.csv), replayed through the
   simulator: every row, then median and p90 |error| per GPU and model in sample; leave one model
   out (the engine constants refitted without that model's rows); leave one GPU out (each GPU run
   with the other GPU's engine constants).
3. Provenance: for every GPU preset, whether its constants were measured or extrapolated, from what,
   and the uncertainty the model claims for it.

    python bench/fidelity.py [--skip-lomo]     (the Argonne leave-one-model-out refits take minutes)
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable

import numpy as np
import vidur
from argonne import Row, rows, simulated_latency
from calibrate import fit_engine

from aisim.engine import calibration
from aisim.engine.costmodel.operators import ELEMENTWISE
from aisim.scenario.presets import GPU_PROFILES


def summary(errors: Iterable[float]) -> str:
    values = np.abs(np.fromiter(errors, dtype=float))
    return f"median {np.median(values):5.1f} %  p90 {np.quantile(values, 0.9):5.1f} %  n {len(values):5d}"


def op_class(op: str) -> str:
    return ELEMENTWISE.get(op, op)


def operator_errors(fit_rows: list[vidur.OpRow], test_rows: list[vidur.OpRow]) -> np.ndarray:
    constants = vidur.fit_operators(fit_rows)
    measured = np.array([r.seconds for r in test_rows])
    return (vidur.predict(constants, test_rows) / measured - 1) * 100


def grouped(test: list[vidur.OpRow], errors: np.ndarray, key: Callable[[vidur.OpRow], str]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for r, e in zip(test, errors):
        out[key(r)].append(float(e))
    return out


def operators() -> None:
    every = vidur.operator_rows()
    print("== Operator profiles (Vidur): |error| of the fitted curves ==")
    for gpu in sorted({r.gpu for r in every}):
        mine = [r for r in every if r.gpu == gpu]
        errors = operator_errors(mine, mine)
        for cls, values in sorted(grouped(mine, errors, lambda r: op_class(r.op)).items()):
            print(f"in sample      {gpu:10} {cls:15} {summary(values)}")
        print(f"in sample      {gpu:10} {'all':15} {summary(errors)}")
        for model in sorted({r.model for r in mine}):
            test = [r for r in mine if r.model == model]
            errors = operator_errors([r for r in mine if r.model != model], test)
            linear = [e for r, e in zip(test, errors) if r.op in vidur.GEMMS]
            print(f"leave-model-out {gpu:10} {model:27} all {summary(errors)} | linear {summary(linear)}")
        for tp in sorted({r.tp for r in mine}):
            test = [r for r in mine if r.tp == tp]
            if len(test) == len(mine):
                continue
            errors = operator_errors([r for r in mine if r.tp != tp], test)
            print(f"leave-TP-out   {gpu:10} TP {tp:<24} all {summary(errors)}")


def replay(data: list[Row]) -> dict[Row, float]:
    return {r: (simulated_latency(r) - r.latency) / r.latency * 100 for r in data}


def per_group(found: dict[Row, float], label: str) -> None:
    groups: dict[str, list[float]] = defaultdict(list)
    for r, e in found.items():
        groups[f"{r.gpu:10} {r.family:11}"].append(e)
        groups[f"{r.gpu:10} {'all':11}"].append(e)
    for name, values in sorted(groups.items()):
        print(f"{label:16} {name} {summary(values)}")
    print(f"{label:16} {'all':22} {summary(found.values())}")


def argonne(skip_lomo: bool) -> None:
    data = rows()
    print("\n== Argonne vLLM whole-batch latency ==")
    print(f"{'gpu':10} {'model':11} {'len':>5} {'batch':>5} {'measured s':>11} {'simulated s':>12} {'error':>8}")
    found = replay(data)
    for r, e in found.items():
        print(f"{r.gpu:10} {r.family:11} {r.length:5} {r.batch:5} {r.latency:11.2f} "
              f"{r.latency * (1 + e / 100):12.2f} {e:+7.1f}%")
    per_group(found, "in sample")
    stored = copy.deepcopy(calibration.DOCUMENT)
    gpus = sorted({r.gpu for r in data})
    crossed: dict[Row, float] = {}
    for gpu in gpus:
        other = next(g for g in gpus if g != gpu)
        engine = stored["engine"][other]
        calibration.with_engine(gpu, engine["step_overhead_ns"], engine["per_request_ns"], engine["kv_bandwidth_share"])
        crossed.update(replay([r for r in data if r.gpu == gpu]))
        calibration.replace_document(copy.deepcopy(stored))
    per_group(crossed, "leave-GPU-out")
    if skip_lomo:
        return
    unseen: dict[Row, float] = {}
    for gpu in gpus:
        for family in sorted({r.family for r in data if r.gpu == gpu}):
            fit_engine(gpu, [r for r in data if r.gpu == gpu and r.family != family])
            unseen.update(replay([r for r in data if r.gpu == gpu and r.family == family]))
            calibration.replace_document(copy.deepcopy(stored))
    per_group(unseen, "leave-model-out")
    everything = list(unseen.values())
    median = statistics.median(abs(e) for e in everything)
    print(f"target leave-model-out median <= 10 %: {'PASS' if median <= 10 else 'FAIL'} ({median:.1f} %)")


def provenance() -> None:
    print("\n== Provenance of each GPU preset's constants ==")
    for name in GPU_PROFILES:
        c = calibration.constants(name)
        kind = "measured" if c.measured else "extrapolated"
        print(f"{name:15} {kind:12} +/-{c.uncertainty * 100:3.0f} %  bandwidth share {c.default.bandwidth:.3f}  "
              f"mfu {c.default.mfu:.3f}  {c.source}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-lomo", action="store_true", help="skip the Argonne leave-one-model-out refits")
    args = parser.parse_args()
    start = time.perf_counter()
    operators()
    argonne(args.skip_lomo)
    provenance()
    print(f"wall      {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
