"""The steady-state judge (`aisim.engine.steady`) on real engine runs: a light load is steady and meets a loose
SLO, a load beyond the engine's capacity is called overloaded (and `run_steady` stops it early), a warm-up
is discarded, and `aisim run`'s report says which it was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from aisim.engine import Simulation
from aisim.engine.steady import Rules, collect, judge, run_steady
from aisim.scenario import check_text

from .conftest import ROOT

SCENARIO = """\
apiVersion: aisim/v1
kind: Scenario
metadata: {{name: steady}}
seed: 3
gpus:
  - {{id: gpu0, profile: H100-SXM}}
models:
  - id: llama3-8b
    family: llama-3-8b
    placement: {{gpus: [gpu0]}}
    engine: {{maxModelLen: 8192, maxNumSeqs: 64}}
workload:
  requests: {requests}
  sources:
    - name: chat
      model: llama3-8b
      arrival: {{kind: poisson, rate: {rate}/s}}
      promptTokens: {{kind: lognormal, median: 500, sigma: 0.6, max: 3000}}
      outputTokens: 40-160
"""
SLO = {"ttft": (0.5, 0.99), "itl": (0.06, 0.99)}


def _sim(tmp_path: Path, rate: float, requests: int) -> Simulation:
    path = tmp_path / "steady.yaml"
    path.write_text(SCENARIO.format(rate=rate, requests=requests), encoding="utf-8")
    checked = check_text(path.read_text(), str(path))
    assert checked.scenario is not None, checked.problems
    return Simulation(checked.scenario, tmp_path, telemetry=False)


def _judged(sim: Simulation) -> dict:
    sim.run()
    engines = [e for s in sim.served_models for e in s.engines]
    return judge(collect(sim.requests, engines, sim.kernel.now), SLO)


def test_a_light_load_is_steady_and_meets_a_loose_slo_with_intervals_around_each_percentile(tmp_path: Path) -> None:
    verdict = _judged(_sim(tmp_path, 8, 1500))
    assert verdict["status"] == "meets" and verdict["steady"] and not verdict["overloaded"]
    for name, (bound, _) in SLO.items():
        entry = verdict["metrics"][name]
        assert entry["low"] <= entry["value"] <= entry["high"] <= bound, (name, entry)
        assert entry["high"] > entry["low"]
    assert verdict["measured_requests"] + verdict["warmup_requests"] == 1500
    assert verdict["measured_s"] >= verdict["slowest_s"]


def test_a_load_beyond_capacity_is_overloaded_from_early_on_and_fails(tmp_path: Path) -> None:
    verdict = _judged(_sim(tmp_path, 120, 3000))
    assert verdict["overloaded"] and verdict["status"] == "overloaded" and not verdict["steady"]
    assert verdict["overloaded_from_s"] is not None and verdict["overloaded_from_s"] < 10
    waiting = verdict["load"]["waiting"]
    assert waiting[-1] > waiting[len(waiting) // 2] > 0


def test_run_steady_stops_an_overloaded_run_early_and_a_steady_one_once_decided(tmp_path: Path) -> None:
    overloaded = run_steady(_sim(tmp_path, 120, 20000), SLO)
    assert overloaded["status"] == "overloaded" and overloaded["stopped_early"]
    full = _sim(tmp_path, 120, 20000)
    full.run()
    assert overloaded["simulated_s"] < full.kernel.now / 1e9 / 4  # a fraction of the run it spared
    steady = run_steady(_sim(tmp_path, 8, 20000), SLO, Rules(min_requests=300))
    assert steady["status"] == "meets" and steady["stopped_early"]
    assert steady["simulated_s"] < 20000 / 8 / 4


def test_too_few_requests_are_unsettled_not_a_verdict(tmp_path: Path) -> None:
    verdict = _judged(_sim(tmp_path, 8, 60))
    assert verdict["status"] == "unsettled" and not verdict["decided"] and not verdict["steady"]


def test_aisim_run_says_whether_the_run_reached_steady_state_and_from_when_it_was_overloaded(tmp_path: Path) -> None:
    def run(rate: float, requests: int, *flags: str) -> subprocess.CompletedProcess[str]:
        path = tmp_path / f"run-{rate}.yaml"
        path.write_text(SCENARIO.format(rate=rate, requests=requests), encoding="utf-8")
        return subprocess.run([sys.executable, "-m", "aisim", "run", str(path), *flags], capture_output=True,
                              text=True, cwd=ROOT, check=True)

    light = json.loads(run(8, 1500, "--json").stdout)["models"]["llama3-8b"]["steady_state"]
    assert light["steady"] and not light["overloaded"] and light["overloaded_from_s"] is None
    heavy = json.loads(run(120, 3000, "--json").stdout)["models"]["llama3-8b"]["steady_state"]
    assert heavy["overloaded"] and not heavy["steady"] and heavy["overloaded_from_s"] is not None
    text = run(120, 3000).stdout
    assert f"overloaded from {heavy['overloaded_from_s']:g} s" in text
    assert "steady state: reached after" in run(8, 1500).stdout
