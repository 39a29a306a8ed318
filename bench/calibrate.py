"""Fit the cost model's host terms (`aisim/engine/costmodel/host.json`): the only constants of a step not from the
kernel tables.

Which data fix which constant:
1. `step_overhead_ns`, `per_request_ns` + `output_ns`, `per_token_ns` (the engine core's CPU time per step, per
   scheduled request and per scheduled token, and the offline `LLM` class's output processing per request): the
   Argonne whole-batch latencies (`bench/argonne.py`, offline, synchronous scheduling, A100 and H100). A batch that
   arrives at t = 0 is scheduled the same whatever its steps cost, so its latency is exactly linear in these terms:
   latency = L0 + step x N + request x R + token x T, with N steps, R scheduled requests and T scheduled tokens
   summed over its steps. Each row is simulated four times (each term alone set to 1 us or 1 ns) to read
   L0, N, R and T; the terms are then the non-negative least squares of the relative error over the rows.
   Only rows on a GPU priced by its own kernel tables (H100-SXM; the Argonne A100 is a 40 GB card, priced from the
   80 GB card's tables scaled) enter the fit, so no table error of a scaled GPU leaks into the host terms; the A100
   rows are scored out of sample.
   The offline rows cannot tell the engine's per-request work from the `LLM` class's output processing (both are
   per request per step there), so the per-request total is split by `SERVER_REQUEST_SHARE`.
2. `frontend_ns` (the API server's time on a request before the engine sees it): the online H100 runs
   (`bench/online.py`) at their lowest-rate stage, where nothing queues: the time that, added to the simulated mean
   TTFT without a front end, makes the median relative error over the runs zero.
Nothing is fitted on the Blackwell end-to-end runs: the fidelity bench scores them out of sample.

`fit_offline(rows)` and `fit_frontend(runs)` are what the fidelity bench refits without a held-out group.

    python bench/calibrate.py [--write] [--holdout FAMILY] [--skip-frontend] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from argonne import Row, rows, scenario

from aisim.engine.costmodel import calibration
from aisim.engine.simulation import Simulation

STORE = Path(calibration.__file__).with_name("host.json")
SERVER_REQUEST_SHARE = 0.5
"""The share of the offline per-request CPU time that is the engine core's (the rest, the `LLM` class's in-process
output processing, the server does in its API-server process). The vLLM v0.6 performance post measured detokenising
and output handling about as costly as scheduling and input preparation per request (`vllm-engine-and-perf-model.md`
§1.7); no data here separates them, so half."""
PROBES = {"step_overhead_ns": 1000.0, "per_request_ns": 1000.0, "per_token_ns": 1.0}
"""Each term set alone to this many ns, to read how many times a batch pays it."""
PER_TOKEN_NS = 0.0
"""Not fitted: the Argonne batches' prefill tokens drive it (it took 24 us a token, 200 ms for a 8,192-token step,
which is the 2024 vLLM's slower prefill kernels showing through, not CPU work); vLLM's input preparation per
token is well under a microsecond. Kept as a term a scenario's data can fix later."""
ZERO = {"step_overhead_ns": 0.0, "per_request_ns": 0.0, "per_token_ns": 0.0, "output_ns": 0.0}


def _latency_ns(args: tuple[Row, dict[str, float]]) -> int:
    row, terms = args
    calibration.with_host(**terms)
    sim = Simulation(scenario(row))
    sim.run()
    assert all(r.outcome == "completed" for r in sim.requests)
    return max(r.finished_at for r in sim.requests)


def counts(data: list[Row], jobs: int = 2) -> np.ndarray:
    """Per row: (latency without host terms, steps, scheduled requests, scheduled tokens), in ns and counts."""
    work = [(row, ZERO) for row in data] + [(row, {**ZERO, k: v}) for k, v in PROBES.items() for row in data]
    if jobs <= 1:
        latencies = [_latency_ns(w) for w in work]
    else:
        with ProcessPoolExecutor(jobs) as pool:
            latencies = list(pool.map(_latency_ns, work, chunksize=4))
    found = np.array(latencies, dtype=np.float64).reshape(4, len(data))
    base = found[0]
    per = [(found[i + 1] - base) / v for i, v in enumerate(PROBES.values())]
    return np.stack([base, *per], axis=1)


def fit_offline(data: list[Row], table: np.ndarray | None = None, jobs: int = 2) -> dict[str, float]:
    """The engine's host terms from offline rows (non-negative least squares of the relative error)."""
    from scipy.optimize import nnls

    table = counts(data, jobs) if table is None else table
    measured = np.array([r.latency * 1e9 for r in data])
    # (L0 + a N + b R + c T) / y - 1 -> [N/y, R/y, T/y] x - (1 - L0/y)
    a = table[:, 1:3] / measured[:, None]
    b = 1 - (table[:, 0] + PER_TOKEN_NS * table[:, 3]) / measured
    x, _ = nnls(a, b)
    step, request = (float(v) for v in x)
    token = PER_TOKEN_NS
    return {"step_overhead_ns": round(step), "per_request_ns": round(request * SERVER_REQUEST_SHARE),
            "output_ns": round(request * (1 - SERVER_REQUEST_SHARE)), "per_token_ns": round(token, 3)}


def predicted(table: np.ndarray, terms: dict[str, float]) -> np.ndarray:
    """Seconds per row under `terms`, from `counts`."""
    request = terms["per_request_ns"] + terms["output_ns"]
    return (table[:, 0] + terms["step_overhead_ns"] * table[:, 1] + request * table[:, 2]
            + terms["per_token_ns"] * table[:, 3]) / 1e9


def fit_frontend(runs: list[Any]) -> int:
    """The API server's per-request time: measured minus simulated mean TTFT at each run's first (lowest-rate)
    stage, without a front end; the median over runs."""
    from online import measured, simulate

    pairs = []
    for run in runs:
        if run.overloaded:
            continue
        first = min(run.stages)
        got = simulate(run, {"frontend": 0}, stage_s=30)[first]
        pairs.append((got.ttft_mean, measured(run.stages[first])["ttft_mean"]))
    # the time that makes the median relative TTFT error zero (monotone in it: bisection)
    low, high = 0.0, max(m - s for s, m in pairs) + 0.1
    for _ in range(60):
        middle = (low + high) / 2
        if statistics.median((s + middle) / m - 1 for s, m in pairs) < 0:
            low = middle
        else:
            high = middle
    return max(round(low * 1e9), 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store the fitted terms in costmodel/host.json")
    parser.add_argument("--holdout", metavar="FAMILY", help="fit without this model's rows and report them")
    parser.add_argument("--skip-frontend", action="store_true", help="keep the stored frontend_ns (the online runs "
                        "take minutes)")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    data = rows()
    table = counts(data, args.jobs)
    train = [i for i, r in enumerate(data) if r.family != args.holdout and calibration.constants(r.gpu).measured]
    terms = fit_offline([data[i] for i in train], table[train])
    seconds = predicted(table, {**calibration.host(), **terms})
    errors = np.array([s / r.latency - 1 for s, r in zip(seconds, data)]) * 100
    print("host terms from the Argonne offline rows:", terms)
    for gpu in sorted({r.gpu for r in data}):
        for group, keep in (("fitted", lambda i: i in train), ("held out", lambda i: i not in train)):
            e = np.array([errors[i] for i, r in enumerate(data) if r.gpu == gpu and keep(i)])
            if len(e):
                print(f"  {gpu} {group}: median |error| {np.median(abs(e)):.2f} %, signed {np.median(e):+.2f} %, "
                      f"max {abs(e).max():.2f} % ({len(e)} rows)")
    if not args.skip_frontend:
        from online import runs

        calibration.with_host(**terms)
        terms["frontend_ns"] = fit_frontend([r for r in runs() if r.family != args.holdout])
        print(f"frontend from the online H100 runs' first stage: {terms['frontend_ns'] / 1e6:.2f} ms")
    if args.write and not args.holdout:
        document = {"source": "step, request, token and output terms: bench/data/argonne-vllm-calibration.csv "
                              "(offline batches on H100-SXM; the A100 rows out of sample); frontend: bench/data/vllm-online-h100.csv (first stage); "
                              "see bench/calibrate.py",
                    "command": "python bench/calibrate.py --write",
                    "host": {**calibration.host(), **terms},
                    "fit": {"rows": len(data), "median_abs_error_pct": round(float(np.median(abs(errors))), 2),
                            "signed_median_error_pct": round(float(np.median(errors)), 2)}}
        STORE.write_text(json.dumps(document, indent=1) + "\n")
        print(f"wrote {STORE}")


if __name__ == "__main__":
    main()
