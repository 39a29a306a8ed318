"""Fit the online constants (`aisim/engine/online.py`) on the real vLLM servers of `data/vllm-online-h100.csv`.

What is fitted, per GPU type (the data has H100-SXM only), on every run the server kept up with (the
reasoning runs overloaded it; the fit must predict that, not absorb it):

- `engine_step_ns`, `engine_request_ns`: the V1 engine core's CPU time per step and per scheduled request;
- `mfu`, `bandwidth`, `gemm_padding`: the GEMM curve of the server's kernels (vLLM of February 2026) where
  it differs from the Vidur profiles (2024 kernels): its tensor throughput and weight-streaming bandwidth
  as shares of the datasheet peaks, and its token padding. The grid stops at measured bounds: `mfu` at
  0.93, the achieved BF16 GEMM share of an H100 (arXiv 2510.27583, `costmodel/derived.py`), `bandwidth`
  at 1.07, where a decode layer's weights (curve bandwidth plus the per-kernel floor `t0`) stream at
  2.9 TB/s, the achieved HBM copy bandwidth (88 % of 3.35 TB/s, `derived.H100_ACHIEVED_HBM`); padding is
  either the profiles' (`-1`) or none (`0`: a roofline at those shares);
- `frontend_ns`: the API server's time before the engine sees a request, in closed form for each grid
  point: it shifts every request's engine arrival by the same amount, so it adds exactly to TTFT; the
  fit takes the median over the training stages of measured minus simulated mean TTFT.

Each grid point replays every run once (stages shortened to `--stage-seconds`) with its constants
installed as the GPU's online calibration (`online.FITTED`, the path `vllm serve` scenarios take), so
every fit below is a choice among the same replays. The loss is the mean squared (capped, `LOG_CAP`) log
error of mean E2E, decode time per token and mean TTFT over the training stages. Besides the fit on all
runs, one fit per model leaves that model's runs out (leave-one-model-out), for
`bench/online_fidelity.py`. `--write` stores all of them in `aisim/engine/online.json`. Deterministic:
the replays are seeded and the grid is fixed.

    python bench/online_calibrate.py [--write] [--jobs 2] [--stage-seconds 40] [--replays FILE]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from online import Run, measured, runs, simulate

from aisim.engine import online

STORE = Path(online.__file__).with_name("online.json")
STEP_GRID = (0, 300_000, 700_000)
REQUEST_GRID = (0, 10_000)
MFU_GRID = (0.0, 0.93)
"""0.0: the offline calibration's MFU (0.752 on H100-SXM)."""
BANDWIDTH_GRID = (0.0, 1.07)
"""0.0: the offline calibration's bandwidth share (0.967 on H100-SXM)."""
PADDING_GRID = (-1.0, 0.0)
"""-1: the Vidur profiles' token padding (154 on H100-SXM); 0: none."""
FLOOR_GRID = (0,)
"""Cap on a kernel's fixed part, ns (`online.OnlineCost.kernel_floor_ns`): 0 keeps the profiles' floors (GEMM
`t0` 6.7 us, attention 6.7 us, element-wise 1.1-2.6 us on H100-SXM). Its physical lower bound, 1.5 us, is above
the cheapest kernels the same profiles timed (CUPTI kernel durations: residual add 1.1 us, activation 1.8 us)
and above PyTorch's measured ~1.1-1.3 us per tiny op inside a CUDA graph (pytorch/pytorch#161104). The grid
holds only 0: no fold chose 1.5 us in the synchronous-scheduling fit (1,152 replays), leaving it out halves the
calibration, and `online.json` was fitted with this grid (under async scheduling, where the cap was not
retried): add 1_500 to test it again."""
LOG_CAP = 1.0
"""A stage's log error counts at most this much (a factor e): a stage the grid point saturates must not
outweigh every other."""
METRICS = ("e2e_mean", "decode_per_token", "ttft_mean")
GPU = "H100-SXM"

Key = tuple[str, int]
"""(experiment, stage)."""
Replay = dict[Key, dict[str, float]]


Point = tuple[int, int, float, float, float, int]
"""(engine step ns, engine request ns, mfu, bandwidth, gemm padding, kernel floor cap ns)."""
FIELDS = ("engine_step_ns", "engine_request_ns", "mfu", "bandwidth", "gemm_padding", "kernel_floor_ns")


def install(constants: dict[str, float]) -> None:
    """Make `constants` (the fields of `online.OnlineCost`) the GPU's online calibration in this process."""
    online.FITTED[GPU] = online.OnlineCost(int(constants["engine_step_ns"]), int(constants["engine_request_ns"]),
                                           int(constants.get("frontend_ns", 0)), float(constants.get("mfu", 0.0)),
                                           float(constants.get("bandwidth", 0.0)),
                                           float(constants.get("gemm_padding", -1.0)),
                                           int(constants.get("kernel_floor_ns", 0)))


def replay(args: tuple[Run, Point, int]) -> tuple[str, Point, dict[int, dict[str, float]]]:
    """One run at one grid point, with no frontend time: its simulated engine-side metrics per stage."""
    run, point, stage_s = args
    install(dict(zip(FIELDS, point)))
    got = simulate(run, None, stage_s)
    return run.experiment, point, {i: {"e2e_mean": m.e2e_mean, "decode_per_token": m.decode_per_token,
                                               "ttft_mean": m.ttft_mean} for i, m in got.items()}


def fit(train: list[Run], grid: dict[Point, Replay]) -> dict[str, float]:
    """The grid point and frontend time with the least loss on `train`'s stages."""
    rows = {(run.experiment, i): measured(row) for run in train for i, row in run.stages.items()}
    best: dict[str, float] | None = None
    for point, sims in sorted(grid.items()):
        frontend = statistics.median(rows[k]["ttft_mean"] - sims[k]["ttft_mean"] for k in rows)
        frontend = max(frontend, 0.0)
        errors = []
        for key, real in rows.items():
            sim = dict(sims[key], ttft_mean=sims[key]["ttft_mean"] + frontend, e2e_mean=sims[key]["e2e_mean"] + frontend)
            errors.extend(min(abs(math.log(sim[m] / real[m])), LOG_CAP) ** 2 for m in METRICS)
        loss = sum(errors) / len(errors)
        if best is None or loss < best["loss"]:
            best = {**dict(zip(FIELDS, point)), "frontend_ns": round(frontend * 1e9), "loss": loss}
    assert best is not None
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store the fits in aisim/engine/online.json")
    parser.add_argument("--jobs", type=int, default=2, help="replays run in parallel (default 2)")
    parser.add_argument("--stage-seconds", type=int, default=40, help="shorten each stage to this (default 40)")
    parser.add_argument("--replays", type=Path, help="a JSON file of the grid's replays: read if it exists (no replay "
                        "runs), else written after the replays (to refit without replaying)")
    args = parser.parse_args()
    started = time.perf_counter()
    kept = [run for run in runs() if not run.overloaded]
    work = [(run, point, args.stage_seconds) for run, point in itertools.product(kept, itertools.product(
        STEP_GRID, REQUEST_GRID, MFU_GRID, BANDWIDTH_GRID, PADDING_GRID, FLOOR_GRID))]
    grid: dict[Point, Replay] = {}
    if args.replays is not None and args.replays.exists():
        for point, experiment, stage, metrics in json.loads(args.replays.read_text()):
            grid.setdefault(tuple(point), {})[(experiment, stage)] = metrics  # type: ignore[index]
    else:
        with ProcessPoolExecutor(args.jobs) as pool:
            for experiment, point, stages in pool.map(replay, work, chunksize=4):
                for stage, metrics in stages.items():
                    grid.setdefault(point, {})[(experiment, stage)] = metrics
        print(f"{len(work)} replays of {len(kept)} runs in {time.perf_counter() - started:.0f} s")
        if args.replays is not None:
            args.replays.write_text(json.dumps([[list(p), e, i, m] for p, sims in grid.items() for (e, i), m in sims.items()]))
    families = sorted({run.family for run in kept})
    fits = {"all": fit(kept, grid)}
    for family in families:
        fits[f"without {family}"] = fit([run for run in kept if run.family != family], grid)
    for name, found in fits.items():
        print(f"{name:24} engine step {found['engine_step_ns'] / 1e3:7.0f} us, per request "
              f"{found['engine_request_ns'] / 1e3:5.0f} us, mfu {found['mfu'] or 'offline'}, "
              f"bandwidth {found['bandwidth'] or 'offline'}, padding {'profiles' if found['gemm_padding'] < 0 else found['gemm_padding']}, "
              f"kernel floor {found['kernel_floor_ns'] / 1e3 if found['kernel_floor_ns'] else 'profiles'}, "
              f"frontend {found['frontend_ns'] / 1e6:6.2f} ms (loss {found['loss']:.4f})")
    if args.write:
        def constants(found: dict[str, float]) -> dict[str, float]:
            return {**{k: int(found[k]) for k in ("engine_step_ns", "engine_request_ns", "frontend_ns", "kernel_floor_ns")},
                    **{k: found[k] for k in ("mfu", "bandwidth", "gemm_padding")}}

        document = {
            "source": "bench/data/vllm-online-h100.csv (inference-sim/training default_args, commit ed5c1d26; "
                      "see bench/online.py for the assumptions)",
            "command": f"python bench/online_calibrate.py --write --stage-seconds {args.stage_seconds}",
            "gpus": {"H100-SXM": constants(fits["all"])},
            "leave_one_model_out": {family: constants(fits[f"without {family}"]) for family in families},
        }
        STORE.write_text(json.dumps(document, indent=2) + "\n")
        print(f"wrote {STORE}")


if __name__ == "__main__":
    main()
