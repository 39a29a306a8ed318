"""`aisim plan` with the real engine: the rate it reports, infeasible configurations, execution, headroom.

The plans are tiny (a few configurations, 60 requests per replica per evaluated rate) so that each test
runs in seconds; the documented example is `bench/plan.py`'s business.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from aisim.plan import plan_file
from aisim.plan.output import csv_text, yaml_text
from aisim.scenario import check_text

from .conftest import ROOT

BASE = """\
apiVersion: aisim/v1
kind: Scenario
metadata: {name: tiny-plan}
seed: 7
gpus:
  - {id: gpu0, profile: H100-SXM}
models:
  - id: llama3-8b
    family: llama-3-8b
    placement: {gpus: [gpu0]}
    engine: {maxModelLen: 8192}
workload:
  duration: 60s
  sources:
    - name: chat
      model: llama3-8b
      arrival: {kind: poisson, rate: 4/s}
      promptTokens: {kind: lognormal, median: 500, sigma: 0.6, max: 3000}
      outputTokens: 40-160
plan:
"""
PLAN = """\
  space:
    gpus: [H100-SXM]
    replicas: [1, 2]
    maxNumSeqs: [64, 256]
  slo:
    ttft: {max: 400ms}
    itl: {max: 60ms}
  goal: goodput_per_gpu
  search: {requests: 60, precision: 0.05}
"""


def _write(tmp_path: Path, plan: str = PLAN, name: str = "plan.yaml") -> Path:
    path = tmp_path / name
    path.write_text(BASE + plan, encoding="utf-8")
    return path


def _aisim(*args: str) -> subprocess.CompletedProcess[str]:
    import sys

    return subprocess.run([sys.executable, "-m", "aisim", *args], capture_output=True, text=True, cwd=ROOT, check=False)


def _without_execution(result: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(result)
    result.pop("execution")
    for row in result["configurations"]:
        row.pop("simulations"), row.pop("cached")
    return result


def test_the_reported_rate_meets_every_slo_in_a_direct_run_and_misses_one_beyond_the_optimistic_end(tmp_path: Path) -> None:
    run = _aisim("plan", str(_write(tmp_path)), "--json", "--jobs", "1", "--cache", str(tmp_path / "cache"),
                 "--out", str(tmp_path / "out"))
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    winner = next(r for r in result["configurations"] if r["key"] == result["answer"]["winner"])
    assert winner["rank"] == 1 and winner["status"] == "meets"
    assert winner["capacity"]["conservative"] == winner["max_rate"] < winner["capacity"]["optimistic"]
    scenario = tmp_path / "out" / "winner.yaml"
    assert f"rate: {winner['max_rate']:.4f}/s" in scenario.read_text() and "duration: 600s" in scenario.read_text()
    assert result["vllm_serve"] in scenario.read_text() and "--max-num-seqs" in result["vllm_serve"]

    def p99s(path: Path) -> tuple[dict[str, float], dict[str, Any]]:
        direct = _aisim("run", str(path), "--json")
        assert direct.returncode == 0, direct.stderr
        model = json.loads(direct.stdout)["models"]["llama3-8b"]
        return {"ttft": model["ttft"]["p99"], "itl": model["itl"]["p99"]}, model["steady_state"]

    slo = {name: bound["max_s"] for name, bound in result["slo"].items()}
    at_rate, steady = p99s(scenario)  # ten simulated minutes at the conservative rate
    assert all(at_rate[name] <= slo[name] for name in slo), (at_rate, slo)
    assert steady["steady"] and not steady["overloaded"], steady
    faster = tmp_path / "faster.yaml"
    optimistic = winner["capacity"]["optimistic"]
    faster.write_text(re.sub(r"rate: ([\d.]+)/s", lambda m: f"rate: {optimistic * 1.1:.4f}/s", scenario.read_text()))
    at_more, steady = p99s(faster)
    assert steady["overloaded"] or any(at_more[name] > slo[name] for name in slo), (at_more, slo, steady)


def test_infeasible_configurations_are_listed_with_their_reason_and_not_simulated(tmp_path: Path) -> None:
    plan = PLAN.replace("gpus: [H100-SXM]", "gpus: [H100-SXM, L4]").replace("replicas: [1, 2]", "replicas: [1]") \
        + "  prices: {L4: 0.8}\n"
    plan = plan.replace("  slo:", "    tensorParallel: [1, 3]\n    gpuMemoryUtilization: [0.6]\n  slo:")
    result = plan_file(_write(tmp_path, plan), jobs=1)
    rows = {r["key"]: r for r in result["configurations"]}
    l4 = rows["L4 tp1 x1 seqs=64 tokens=default gmu=0.6"]
    assert l4["status"] == "infeasible" and "more than the 13.22 GiB" in l4["reason"] and l4["simulations"] == 0
    split = rows["H100-SXM tp3 x1 seqs=64 tokens=default gmu=0.6"]
    assert split["status"] == "infeasible" and "divisible by tensor parallel size (3)" in split["reason"]
    assert rows["H100-SXM tp1 x1 seqs=64 tokens=default gmu=0.6"]["status"] == "meets"
    assert result["execution"]["infeasible"] == 6 and all(r["rank"] > 2 for r in rows.values() if r["status"] == "infeasible")
    assert "infeasible" in csv_text(result) and "L4 tp1" in csv_text(result)


def test_serial_pool_and_ray_give_identical_json(tmp_path: Path) -> None:
    path = _write(tmp_path)
    serial = plan_file(path, jobs=1, cache_dir=str(tmp_path / "a"))
    pool = plan_file(path, jobs=2, cache_dir=str(tmp_path / "b"))
    assert json.dumps(serial) == json.dumps(pool)
    assert serial["execution"]["simulations"] > 8


def test_a_local_ray_cluster_gives_the_same_json(tmp_path: Path) -> None:
    """Ray is in the test extra, so CI runs this; importorskip keeps a bare checkout's suite running."""
    ray = pytest.importorskip("ray")
    path = _write(tmp_path)
    serial = plan_file(path, jobs=1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = plan_file(path, ray_address="local")
    finally:
        ray.shutdown()
    assert json.dumps(on_ray) == json.dumps(serial)


def test_a_second_run_does_no_simulation(tmp_path: Path) -> None:
    path, cache = _write(tmp_path), str(tmp_path / "cache")
    first = plan_file(path, jobs=1, cache_dir=cache)
    second = plan_file(path, jobs=2, cache_dir=cache)
    assert first["execution"]["simulations"] > 0 and first["execution"]["cached"] == 0
    assert second["execution"]["simulations"] == 0 and second["execution"]["cached"] == first["execution"]["simulations"]
    assert _without_execution(first) == _without_execution(second)
    refined = plan_file(_write(tmp_path, PLAN.replace("replicas: [1, 2]", "replicas: [1, 2, 3]"), "refined.yaml"),
                        jobs=1, cache_dir=cache)
    assert 0 < refined["execution"]["simulations"] < refined["execution"]["cached"]  # only the x3 ones run


def test_survive_one_needs_another_replica(tmp_path: Path) -> None:
    plan = PLAN.replace("replicas: [1, 2]", "replicas: [1, 2, 3, 4]").replace("maxNumSeqs: [64, 256]", "maxNumSeqs: [256]") \
        .replace("goal: goodput_per_gpu", "goal: cheapest\n  targetRate: 90/s")
    plain = plan_file(_write(tmp_path, plan), jobs=1)
    survive = plan_file(_write(tmp_path, plan + "  survive: 1\n", "survive.yaml"), jobs=1)
    needed = next(r for r in plain["configurations"] if r["key"] == plain["answer"]["winner"])["replicas"]
    assert 2 <= needed <= 3  # one replica cannot carry the target alone, so losing one matters
    assert plain["answer"]["winner"] == f"H100-SXM tp1 x{needed} seqs=256 tokens=default gmu=0.9"
    assert survive["answer"]["winner"] == f"H100-SXM tp1 x{needed + 1} seqs=256 tokens=default gmu=0.9"
    one = next(r for r in survive["configurations"] if r["replicas"] == 1)
    assert one["status"] == "infeasible" and "cannot survive losing 1" in one["reason"]
    lost = next(r for r in survive["configurations"] if r["replicas"] == needed + 1)["at_max"]["lost"]
    assert lost > 0  # the lost replica's requests failed with EngineDeadError and were counted apart
    assert [f["kind"] for f in survive["winner_scenario"]["faults"]] == ["xid"]


def test_a_plan_nobody_can_meet_says_so_and_shows_the_closest(tmp_path: Path) -> None:
    run = _aisim("plan", str(_write(tmp_path, PLAN.replace("ttft: {max: 400ms}", "ttft: {max: 1ms}"))), "--no-cache")
    assert run.returncode == 1, run.stderr
    assert "no configuration meets the SLO at any rate down to the lowest tried" in run.stdout
    closest = run.stdout.split("Closest:")[1]
    assert len(re.findall(r"misses TTFT p99 [\d,.]+ ms > 1.0 ms", closest)) == 4
    assert "winner as a vLLM command" not in run.stdout


def test_plan_mistakes_are_reported_with_their_place(tmp_path: Path) -> None:
    plan = PLAN.replace("gpus: [H100-SXM]", "gpus: [H100-SMX]").replace("goal: goodput_per_gpu", "goal: cheapest") \
        + "  model: llama-3\n"
    checked = check_text(BASE + plan, "bad.yaml", tmp_path)
    text = {(p.line, p.column, p.message) for p in checked.problems}
    assert checked.scenario is None
    assert any((line, column) == (22, 12) and "'H100-SMX' is not one of" in message and "did you mean 'H100-SXM'" in message
               for line, column, message in text), text
    assert any(line == 30 and "unknown model 'llama-3'; did you mean 'llama3-8b'" in message for line, _, message in text), text
    no_target = check_text(BASE + PLAN.replace("goal: goodput_per_gpu", "goal: cheapest"), "t.yaml", tmp_path)
    assert [p.message for p in no_target.problems if p.severity == "error"] == ["goal cheapest needs targetRate"]


def test_the_winner_scenario_is_a_valid_scenario(tmp_path: Path) -> None:
    result = plan_file(_write(tmp_path), jobs=1)
    checked = check_text(yaml_text(result["winner_scenario"], "winner"), "w.yaml", tmp_path)
    assert checked.valid, checked.problems


def test_a_slo_met_at_every_rate_stops_at_the_highest_rate_searched(tmp_path: Path) -> None:
    """Twenty requests meet a loose SLO at any rate: one replica passes up to the highest rate searched, and two
    replicas, which start from that rate doubled, start at the highest rate instead of searching nothing (an
    IndexError before)."""
    from aisim.plan.evaluate import MAX_RATE

    loose = PLAN.replace("ttft: {max: 400ms}", "ttft: {max: 1h}").replace("itl: {max: 60ms}", "itl: {max: 1h}")
    loose = loose.replace("maxNumSeqs: [64, 256]", "maxNumSeqs: [256]").replace("requests: 60", "requests: 20")
    result = plan_file(_write(tmp_path, loose), jobs=1, cache_dir=str(tmp_path / "cache"))
    rows = {row["replicas"]: row for row in result["configurations"]}
    assert {replicas: row["status"] for replicas, row in rows.items()} == {1: "meets", 2: "meets"}
    assert rows[2]["max_rate"] <= MAX_RATE and rows[2]["curve"]
