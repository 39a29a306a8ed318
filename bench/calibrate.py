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
2. `critical_ns` (per step, on the critical path whatever the scheduling): the online H100 runs (`bench/online.py`,
   real `vllm serve` servers of 2026, async scheduling), every stage the client kept up with, replayed whole: there
   the engine core's CPU terms hide under the kernels, so what a decode token takes over the tables' kernels is
   this term (the median over stages of measured minus simulated decode time per token, simulated without it). It
   is fitted first; the Argonne fit (1) then takes it as given (`critical x steps` is part of `L0`).
3. `frontend_ns` (the API server's time on a request before the engine sees it): the same stages, simulated with
   the fitted `critical_ns`: the time that, added to the simulated mean TTFT without a front end, makes the median
   relative TTFT error over the stages zero.
4. `frontend_token_ns` (the API server's tokenizer time per prompt token): the Blackwell closed loops
   (`bench/silicon.py`) of at most `TOKEN_FIT_CLIENTS` clients, simulated without it: the Theil-Sen slope of
   measured minus simulated mean TTFT over the mean prompt length (`fit_frontend_token`). A slope, so it is fitted
   before `frontend_ns` (3), which then takes it as given: the online stages' prompts (575-1,082 tokens) cannot
   separate the two, the Blackwell rows' (820-8,192) can. The fidelity bench refits both per held-out model and GPU.

`fit_offline(rows)`, `fit_critical(runs)`, `fit_frontend(runs)` and `fit_frontend_token(rows)` are what the fidelity
bench refits without a held-out group.

    python bench/calibrate.py [--write] [--holdout FAMILY] [--skip-online] [--skip-token] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
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
ZERO = {"step_overhead_ns": 0.0, "per_request_ns": 0.0, "per_token_ns": 0.0, "output_ns": 0.0, "critical_ns": 0.0}


def _latency_ns(args: tuple[Row, dict[str, float]]) -> int:
    row, terms = args
    calibration.with_host(**terms)
    sim = Simulation(scenario(row))
    sim.run()
    assert all(r.outcome == "completed" for r in sim.requests)
    return max(r.finished_at for r in sim.requests)


def _map(function: Callable[[Any], Any], work: list[Any], jobs: int, chunksize: int = 1) -> list[Any]:
    """`function` (which installs host terms of its own) over `work`: in this process, with the installed terms put
    back after, or in a pool of `jobs` processes."""
    if jobs <= 1:
        installed = calibration.host()
        try:
            return [function(w) for w in work]
        finally:
            calibration.with_host(**installed)
    with ProcessPoolExecutor(max(1, min(jobs, len(work)))) as pool:
        return list(pool.map(function, work, chunksize=chunksize))


def counts(data: list[Row], jobs: int = 2) -> np.ndarray:
    """Per row: (latency without host terms, steps, scheduled requests, scheduled tokens), in ns and counts."""
    work = [(row, ZERO) for row in data] + [(row, {**ZERO, k: v}) for k, v in PROBES.items() for row in data]
    latencies = _map(_latency_ns, work, jobs, chunksize=4)
    found = np.array(latencies, dtype=np.float64).reshape(4, len(data))
    base = found[0]
    per = [(found[i + 1] - base) / v for i, v in enumerate(PROBES.values())]
    return np.stack([base, *per], axis=1)


def fit_offline(data: list[Row], table: np.ndarray | None = None, jobs: int = 2,
                critical: float | None = None) -> dict[str, float]:
    """The engine's host terms from offline rows (non-negative least squares of the relative error), with the
    critical-path term `critical` ns per step given (default: the installed one)."""
    from scipy.optimize import nnls

    critical = calibration.host()["critical_ns"] if critical is None else critical
    table = counts(data, jobs) if table is None else table
    measured = np.array([r.latency * 1e9 for r in data])
    # (L0 + k N + a N + b R + c T) / y - 1 -> [N/y, R/y, T/y] x - (1 - (L0 + k N)/y)
    a = table[:, 1:3] / measured[:, None]
    b = 1 - (table[:, 0] + critical * table[:, 1] + PER_TOKEN_NS * table[:, 3]) / measured
    x, _ = nnls(a, b)
    step, request = (float(v) for v in x)
    token = PER_TOKEN_NS
    return {"step_overhead_ns": round(step), "per_request_ns": round(request * SERVER_REQUEST_SHARE),
            "output_ns": round(request * (1 - SERVER_REQUEST_SHARE)), "per_token_ns": round(token, 3)}


def predicted(table: np.ndarray, terms: dict[str, float]) -> np.ndarray:
    """Seconds per row under `terms`, from `counts`."""
    request = terms["per_request_ns"] + terms["output_ns"]
    step = terms["step_overhead_ns"] + terms.get("critical_ns", 0.0)
    return (table[:, 0] + step * table[:, 1] + request * table[:, 2]
            + terms["per_token_ns"] * table[:, 3]) / 1e9


def _online_metrics(args: tuple[Any, dict[str, float]]) -> tuple[str, dict[int, Any]]:
    """One online run replayed whole with `terms` installed as host terms in this process."""
    from online import simulate

    run, terms = args
    calibration.with_host(**terms)
    return run.experiment, simulate(run, None)


def _stage_cache(run: Any, terms: dict[str, float]) -> Path:
    """Where one run's simulated stages under `terms` are kept: keyed by the run, the terms, the package's hash and
    the online bench's code (the folds' fits share the replays without a critical term)."""
    import hashlib

    from silicon import BENCH, code_hash

    key = json.dumps([run.experiment, sorted(terms.items()), code_hash()]).encode() + (BENCH / "online.py").read_bytes()
    return BENCH / ".cache" / "online-stages" / f"{hashlib.sha256(key).hexdigest()[:24]}.json"


def online_stages(runs: list[Any], terms: dict[str, float], jobs: int = 2) -> list[tuple[Any, Any]]:
    """(simulated, measured) metrics of every stage of the runs the client kept up with, under `terms`; the
    simulated ones as {"ttft_mean", "decode_per_token"} (cached per run and terms)."""
    from online import measured

    kept = [r for r in runs if not r.overloaded]
    found: dict[str, dict[int, dict[str, float]]] = {}
    todo = []
    for r in kept:
        path = _stage_cache(r, terms)
        if path.is_file():
            found[r.experiment] = {int(k): v for k, v in json.loads(path.read_text()).items()}
        else:
            todo.append(r)
    if todo:
        got = dict(_map(_online_metrics, [(r, terms) for r in todo], jobs))
        for r in todo:
            stages = {stage: {"ttft_mean": m.ttft_mean, "decode_per_token": m.decode_per_token}
                      for stage, m in got[r.experiment].items()}
            path = _stage_cache(r, terms)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(stages))
            found[r.experiment] = stages
    return [(found[r.experiment][stage], measured(row)) for r in kept for stage, row in sorted(r.stages.items())]


NO_FRONT_END = {"frontend_ns": 0.0, "frontend_token_ns": 0.0}


def fit_critical(runs: list[Any], jobs: int = 2) -> int:
    """The per-step critical-path time: the median over the online stages of measured minus simulated decode time
    per token, simulated with the engine's host terms as installed and no critical term, no front end."""
    pairs = online_stages(runs, {**calibration.host(), "critical_ns": 0.0, **NO_FRONT_END}, jobs)
    return max(round(statistics.median(m["decode_per_token"] - s["decode_per_token"] for s, m in pairs) * 1e9), 0)


def fit_frontend(runs: list[Any], critical: float | None = None, jobs: int = 2, token: float | None = None) -> int:
    """The API server's per-request time: the time that, added to the simulated mean TTFT of every online stage
    (simulated with the installed host terms and `critical` ns per step, without a front end) together with the
    tokenizer's `token` ns per prompt token (default: the installed `frontend_token_ns`) over the stage's measured
    mean prompt, makes the median relative TTFT error zero. (The online stages keep their tokenizer thread below
    5 % busy, so its time adds to TTFT as a delay.)"""
    critical = calibration.host()["critical_ns"] if critical is None else critical
    token = calibration.host()["frontend_token_ns"] if token is None else token
    tokens = [float(r.config["prompt_len_mean"]) for r in runs if not r.overloaded for _ in r.stages]
    pairs = [(s["ttft_mean"] + token * n / 1e9, m["ttft_mean"]) for (s, m), n in
             zip(online_stages(runs, {**calibration.host(), "critical_ns": critical, **NO_FRONT_END}, jobs), tokens)]
    # the time that makes the median relative TTFT error zero (monotone in it: bisection)
    low, high = 0.0, max(m - s for s, m in pairs) + 0.1
    for _ in range(60):
        middle = (low + high) / 2
        if statistics.median((s + middle) / m - 1 for s, m in pairs) < 0:
            low = middle
        else:
            high = middle
    return max(round(low * 1e9), 0)


TOKEN_FIT_CLIENTS = 8
"""The Blackwell rows that fix `frontend_token_ns`: closed loops of at most this many clients, where a request's TTFT
is its front end, a step's wait and its own prefill, not a queue behind other prompts."""


TOKEN_FIT_FRONTEND_NS = 8879119.0
"""The fixed front end the Blackwell fit's simulations run with (any value: the fit is a slope, which a constant added
to every TTFT leaves alone; fixed, so that a refit of the shipped one does not invalidate them)."""


def no_token_term() -> None:
    """Install no tokenizer term (the Blackwell fit's simulations; module level, so a worker process can run it)."""
    calibration.with_host(frontend_token_ns=0.0, frontend_ns=TOKEN_FIT_FRONTEND_NS)


def fit_frontend_token(data: list[Any], jobs: int = 1, rounds: int | None = None) -> float:
    """The API server's tokenizer time per prompt token, from the Blackwell closed loops of at most
    `TOKEN_FIT_CLIENTS` clients (`bench/silicon.py`: InferenceMAX's `benchmark_serving` sends text prompts that
    vLLM tokenizes, 820-1,024 or 6,553-8,192 tokens): the Theil-Sen slope (the median of the pairwise slopes) of
    measured minus simulated mean TTFT against the mean prompt length, simulated without the term. A slope, so
    what the rows' TTFT lacks at every length alike (the fixed front end, fitted on the online runs) does not
    enter it."""
    import silicon

    rows = [r for r in data if r.concurrency <= TOKEN_FIT_CLIENTS]
    found = silicon.predict(rows, jobs, silicon.ROUNDS if rounds is None else rounds, install=no_token_term,
                            fit=f"no-frontend-token|{TOKEN_FIT_FRONTEND_NS:.0f}", front_end_given=True)
    points = [(silicon.mean_prompt(r), r.ttft_ms - found[r.id].ttft_ms) for r in rows if not found[r.id].refused]
    slopes = [(g2 - g1) / (n2 - n1) for n1, g1 in points for n2, g2 in points if n2 > n1]
    return max(statistics.median(slopes) * 1e6, 0.0) if slopes else 0.0  # ms per token -> ns per token


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store the fitted terms in costmodel/host.json")
    parser.add_argument("--holdout", metavar="FAMILY", help="fit without this model's rows and report them")
    parser.add_argument("--skip-online", "--skip-frontend", dest="skip_online", action="store_true",
                        help="keep the stored critical_ns and frontend_ns (the online runs take minutes)")
    parser.add_argument("--skip-token", action="store_true",
                        help="keep the stored frontend_token_ns (its Blackwell simulations take minutes uncached)")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    terms: dict[str, float] = {}
    online_runs: list[Any] = []
    if not args.skip_online:
        from online import runs

        online_runs = [r for r in runs() if r.family != args.holdout]
        terms["critical_ns"] = fit_critical(online_runs, args.jobs)
        calibration.with_host(critical_ns=terms["critical_ns"])
        print(f"critical path per step from the online H100 runs' decode time per token: "
              f"{terms['critical_ns'] / 1e6:.3f} ms")
    data = rows()
    table = counts(data, args.jobs)
    train = [i for i, r in enumerate(data) if r.family != args.holdout and calibration.constants(r.gpu).measured]
    terms.update(fit_offline([data[i] for i in train], table[train]))
    seconds = predicted(table, {**calibration.host(), **terms})
    errors = np.array([s / r.latency - 1 for s, r in zip(seconds, data)]) * 100
    print("host terms from the Argonne offline rows:", terms)
    for gpu in sorted({r.gpu for r in data}):
        for group, keep in (("fitted", lambda i: i in train), ("held out", lambda i: i not in train)):
            e = np.array([errors[i] for i, r in enumerate(data) if r.gpu == gpu and keep(i)])
            if len(e):
                print(f"  {gpu} {group}: median |error| {np.median(abs(e)):.2f} %, signed {np.median(e):+.2f} %, "
                      f"max {abs(e).max():.2f} % ({len(e)} rows)")
    calibration.with_host(**terms)
    if not args.skip_token:
        import silicon

        terms["frontend_token_ns"] = round(fit_frontend_token(silicon.rows(), jobs=1), 1)
        calibration.with_host(frontend_token_ns=terms["frontend_token_ns"])
        print(f"API server tokenizer per prompt token from the Blackwell closed loops of <= {TOKEN_FIT_CLIENTS} "
              f"clients: {terms['frontend_token_ns'] / 1e3:.2f} us")
    if not args.skip_online:
        terms["frontend_ns"] = fit_frontend(online_runs, jobs=args.jobs)
        print(f"frontend from the online H100 runs' TTFT (the tokenizer term given): {terms['frontend_ns'] / 1e6:.2f} ms")
    if args.write and not args.holdout:
        document = {"source": "critical and frontend terms: bench/data/vllm-online-h100.csv (every stage the client "
                              "kept up with, replayed whole); step, request, token and output terms: "
                              "bench/data/argonne-vllm-calibration.csv (offline batches on H100-SXM, the critical "
                              "term given; the A100 rows out of sample); frontend_token_ns: the Blackwell closed "
                              "loops of at most 8 clients (bench/data/aiconfigurator/silicon-blackwell.csv, the "
                              "slope of TTFT over prompt length; refitted per fold by bench/fidelity.py); see "
                              "bench/calibrate.py",
                    "command": "python bench/calibrate.py --write",
                    "host": {**calibration.host(), **terms},
                    "fit": {"rows": len(data), "median_abs_error_pct": round(float(np.median(abs(errors))), 2),
                            "signed_median_error_pct": round(float(np.median(errors)), 2)}}
        STORE.write_text(json.dumps(document, indent=1) + "\n")
        print(f"wrote {STORE}")


if __name__ == "__main__":
    main()
