"""How close aisim is to real vLLM servers under inference-perf, out of sample: every run of the online data.

Each run is predicted with the constants fitted on these runs, the per-step critical-path time `critical_ns` and the
API server's `frontend_ns` (`bench/calibrate.py`), fitted again without its model's runs (leave-one-model-out,
`folds.online_folds`; the engine's other host terms come from the Argonne offline rows, every GPU term from the
kernel tables), replayed in
full (every stage at its measured rate and duration, 300 s client timeout). Prints, per run and stage,
the error of mean and p99 TTFT, mean and p99 E2E and decode time per token; then the median and worst
|error| per metric for each model and stage index and overall, over the runs the server kept up with;
then, for every run, whether aisim calls it overloaded against what the client saw (failures).

Targets (issue 23): median |error| of E2E mean and decode time per token <= 10 %, TTFT mean <= 15 %,
TTFT p99 <= 25 %; every overloaded run called overloaded and none of the others.

    python bench/online_fidelity.py [--jobs 2] [--fit all]
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ProcessPoolExecutor

from folds import online_folds
from online import Run, measured, runs, simulate

from aisim.engine.client_report import StageMetrics
from aisim.engine.costmodel import calibration

METRICS = ("ttft_mean", "ttft_p99", "e2e_mean", "e2e_p99", "decode_per_token")
TARGETS = {"e2e_mean": 10.0, "decode_per_token": 10.0, "ttft_mean": 15.0, "ttft_p99": 25.0}


def predict(args: tuple[Run, dict[str, float] | None]) -> tuple[str, dict[int, StageMetrics], float]:
    """One run, with `constants` (critical_ns, frontend_ns) installed as host terms (None: the shipped ones)."""
    run, constants = args
    started = time.perf_counter()
    if constants is not None:
        calibration.with_host(**constants)
    got = simulate(run, None)
    return run.experiment, got, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="runs replayed in parallel (default 2)")
    parser.add_argument("--fit", choices=("lomo", "all"), default="lomo",
                        help="lomo: each model with the fit that never saw it (default); all: the shipped fit (in sample)")
    args = parser.parse_args()
    everything = runs()
    fitted = online_folds(args.jobs) if args.fit == "lomo" else {}
    folds: dict[str, dict[str, float] | None] = {}
    for family in {run.family for run in everything}:
        folds[family] = fitted.get(family)
        print(f"online constants without {family}: {folds[family]}")
    work = [(run, folds[run.family]) for run in everything]
    started = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        results = {experiment: (got, wall) for experiment, got, wall in pool.map(predict, work)}
    errors: dict[tuple[str, int], dict[str, float]] = {}
    print(f"{'model':14} {'profile':9} {'stage':>5} {'rate':>4} " + " ".join(f"{m:>16}" for m in METRICS) + "   wall")
    for run in everything:
        got, wall = results[run.experiment]
        if run.overloaded:
            continue
        for stage, row in sorted(run.stages.items()):
            real, sim = measured(row), got[stage]
            error = {m: (getattr(sim, m) - real[m]) / real[m] * 100 for m in METRICS}
            errors[(run.experiment, stage)] = error
            print(f"{run.family:14} {run.profile:9} {stage:5} {row['rate']:>4} "
                  + " ".join(f"{error[m]:+15.1f}%" for m in METRICS) + f" {wall:5.1f}s")
    print("\nmedian / worst |error| (runs the server kept up with)")
    by_run = {run.experiment: run for run in everything}
    groups: dict[str, list[dict[str, float]]] = {}
    for (experiment, stage), error in errors.items():
        groups.setdefault(f"{by_run[experiment].family} stage {stage}", []).append(error)
        groups.setdefault(by_run[experiment].family, []).append(error)
        groups.setdefault(f"all stage {stage}", []).append(error)
        groups.setdefault("all", []).append(error)
    medians: dict[str, float] = {}
    for name in sorted(groups, key=lambda n: (n.startswith("all"), n)):
        rows = groups[name]
        cells = []
        for m in METRICS:
            values = [abs(r[m]) for r in rows]
            cells.append(f"{statistics.median(values):6.1f} / {max(values):6.1f}")
            if name == "all":
                medians[m] = statistics.median(values)
        print(f"{name:24} n={len(rows):2} " + "  ".join(f"{m} {c}" for m, c in zip(METRICS, cells)))
    print("\noverload: aisim's call (first overloaded stage, from) against the client's failures")
    calls_right = True
    for run in everything:
        got, _ = results[run.experiment]
        called = [(i, s.overloaded_from_s) for i, s in sorted(got.items()) if s.overloaded]
        real_failures = sum(int(r["failures"]) for r in run.stages.values())
        sim_failures = sum(s.failures for s in got.values())
        right = bool(called) == run.overloaded
        calls_right = calls_right and right
        when = f"stage {called[0][0]} from {called[0][1]:.0f} s" if called else "not overloaded"
        print(f"{run.family:14} {run.profile:9} real {'OVERLOADED' if run.overloaded else 'kept up':10} "
              f"(failures {real_failures:4}) aisim {when:24} (failures {sim_failures:4}) {'ok' if right else 'WRONG'}")
    print()
    for m, target in TARGETS.items():
        print(f"target {m:17} median |error| <= {target:4.0f} %: {'PASS' if medians[m] <= target else 'FAIL'} "
              f"({medians[m]:.1f} %)")
    print(f"target overload calls: {'PASS' if calls_right else 'FAIL'}")
    simulated = sum(float(r["duration_s"]) for run in everything for r in run.stages.values())
    print(f"wall {time.perf_counter() - started:.0f} s for {len(everything)} runs ({simulated:.0f} simulated s, "
          f"{args.jobs} jobs)")


if __name__ == "__main__":
    main()
