"""Calibration check: logs made by a scenario with deliberately wrong cost-model constants, fitted
back with `aisim calibrate`'s search; prints the recovered constants against the truth.

Two logs of the same workload (bursts of 1-48 requests, short and long prompts): one from the
headless simulation of the wrong scenario (exact), one recorded by `aisim serve --record` on it
while `aisim replay --against` sends the workload (wall-clock jitter included).

    python bench/replay_calibrate.py [--skip-served]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from aisim.engine.costmodel import Efficiency
from aisim.replay.calibrate import calibrate
from aisim.replay.formats import read_log
from aisim.replay.live import LiveReplay
from aisim.replay.records import LoggedRequest, RequestLog
from aisim.replay.simulate import SimulationReplay
from aisim.scenario import check_text

BASE = """apiVersion: aisim/v1
kind: Scenario
metadata: {name: calib}
seed: 1
gpus:
  - id: gpu0
    profile: H100-SXM
models:
  - id: llama
    family: llama-3-8b
    placement: {gpus: [gpu0]}
"""
TRUTH = Efficiency(bandwidth=0.62, mfu=0.31, step_overhead_ns=3_200_000, per_request_ns=130_000)
WRONG = BASE + """    costModel: {bandwidthEfficiency: 0.62, mfu: 0.31, stepOverhead: 3.2ms, perRequestOverhead: 130us}
"""
KEYS = ("bandwidth", "mfu", "step_overhead_ns", "per_request_ns")


def workload(gap_s: float = 5.0, bursts: tuple[int, ...] = (1, 4, 16, 48)) -> RequestLog:
    rng = np.random.default_rng(3)
    requests: list[LoggedRequest] = []
    start = 0
    for burst in bursts:
        for prompt in (32, 3000):
            requests += [LoggedRequest(start + j * 1000, "llama", prompt + int(rng.integers(0, 16)),
                                       int(rng.integers(48, 96))) for j in range(burst)]
            start += int(gap_s * 1e9)
    return RequestLog(requests, source="bench")


def show(label: str, log: RequestLog) -> None:
    base = check_text(BASE).scenario
    assert base is not None
    result = calibrate(log, base)
    found = result.fits["llama"]
    print(f"{label}: {len(log)} requests, {found.evaluations} replays, loss {found.loss:.3g}")
    for key in KEYS:
        truth, got, start = getattr(TRUTH, key), getattr(found.efficiency, key), getattr(result.before["llama"], key)
        print(f"  {key:<17} start {start:>12.6g}  truth {truth:>12.6g}  fitted {got:>12.6g}  ({(got - truth) / truth:+.2%})")
    assert result.drift_before is not None and result.drift_after is not None
    for name in ("ttft", "e2e"):
        print(f"  {name} p95 drift: before {result.drift_before.metrics[name].p95_drift_pct:+.2f} %, "
              f"after {result.drift_after.metrics[name].p95_drift_pct:+.2f} %")


def served_log(path: Path, bursts: tuple[int, ...]) -> RequestLog:
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "wrong.yaml"
        scenario.write_text(WRONG)
        process = subprocess.Popen([sys.executable, "-m", "aisim", "serve", str(scenario), "--record", str(path),
                                    "--port", "0"], stdout=subprocess.PIPE, text=True)
        try:
            assert process.stdout is not None
            found = re.search(r"at (http://\S+)", process.stdout.readline())
            assert found is not None
            LiveReplay(found.group(1), concurrency=64).run(workload(3.0, bursts))
        finally:
            process.terminate()
            process.wait(timeout=30)
    return read_log(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-served", action="store_true", help="only the headless log")
    parser.add_argument("--bursts", default="1,4,16,48", help="burst sizes of the served workload (default 1,4,16,48)")
    args = parser.parse_args()
    wrong = check_text(WRONG).scenario
    assert wrong is not None
    show("headless log", SimulationReplay(wrong).run(workload()))
    if not args.skip_served:
        with tempfile.TemporaryDirectory() as tmp:
            bursts = tuple(int(b) for b in args.bursts.split(","))
            show(f"served log (aisim serve --record, bursts {args.bursts})", served_log(Path(tmp) / "served.jsonl", bursts))


if __name__ == "__main__":
    main()
