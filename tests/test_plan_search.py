"""The planner's search spends little where the answer cannot change: each configuration's throughput
ceiling (a saturated replica) bounds the rates it simulates, and configurations that cannot rank first even
at their ceiling are pruned, with the same winner as a plan that evaluates every configuration.

Tiny plans on the real engine (60 requests per replica per evaluated rate), as in test_plan.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aisim.engine import Simulation
from aisim.engine.report import build_report
from aisim.plan import plan_file, raw_document
from aisim.plan.ranking import config_of
from aisim.plan.space import deployment
from aisim.scenario import Scenario

from .test_plan import BASE

CHEAPEST = """\
  space:
    gpus: [H100-SXM, A100-80GB]
    replicas: [1, 2, 3]
    maxNumSeqs: [64]
  slo:
    ttft: {max: 400ms}
    itl: {max: 60ms}
  goal: cheapest
  targetRate: 30/s
  search: {requests: 60, precision: 0.1}
"""


def _plan(tmp_path: Path, prune: bool) -> dict[str, Any]:
    path = tmp_path / "plan.yaml"
    path.write_text(BASE + CHEAPEST, encoding="utf-8")
    return plan_file(path, jobs=1, prune=prune)


def test_pruned_configurations_could_not_have_won_and_the_winner_is_the_same(tmp_path: Path) -> None:
    pruned_plan, full = _plan(tmp_path, prune=True), _plan(tmp_path, prune=False)
    assert pruned_plan["answer"]["winner"] == full["answer"]["winner"] is not None
    rows = {r["key"]: r for r in pruned_plan["configurations"]}
    every = {r["key"]: r for r in full["configurations"]}
    winner = rows[pruned_plan["answer"]["winner"]]
    assert winner["capacity"] == every[winner["key"]]["capacity"]
    pruned = [r for r in rows.values() if r["status"] == "pruned"]
    assert pruned and pruned_plan["execution"]["pruned"] == len(pruned) and full["execution"]["pruned"] == 0
    assert pruned_plan["execution"]["simulations"] < full["execution"]["simulations"]
    for row in pruned:
        assert row["simulations"] == 0 and row["standing"] == "cannot win" and "not evaluated" in row["reason"]
        assert row["rank"] > winner["rank"]
        # evaluated in full, it ranks below the winner too, and carries no more than its ceiling
        evaluated = every[row["key"]]
        assert evaluated["rank"] > every[winner["key"]]["rank"]
        if evaluated["status"] == "meets":
            assert evaluated["max_rate"] < row["ceiling_rate"]
    # every configuration the pruned plan evaluated is evaluated exactly as in the full plan
    for key, row in rows.items():
        if row["status"] != "pruned":
            assert row.get("capacity") == every[key].get("capacity"), key


def test_the_ceiling_bounds_the_rates_simulated_and_a_run_there_is_overloaded(tmp_path: Path) -> None:
    result = _plan(tmp_path, prune=True)
    row = next(r for r in result["configurations"] if r["key"] == result["answer"]["winner"])
    ceiling = row["capacity"]["ceiling"]
    assert all(point["rate"] < ceiling for point in row["curve"])
    assert row["capacity"]["conservative"] < row["capacity"]["optimistic"] <= ceiling
    # two simulated minutes at the ceiling: arrivals outrun completions
    path = tmp_path / "plan.yaml"
    document = raw_document(path)
    scenario = Scenario.model_validate(document)
    run = deployment(document, scenario, config_of(row), ceiling, tmp_path)
    run["workload"] = {"sources": run["workload"]["sources"], "duration": "120s"}
    sim = Simulation(Scenario.model_validate(run), tmp_path, telemetry=False)
    sim.run()
    model = next(iter(build_report(sim)["models"].values()))
    assert model["steady_state"]["overloaded"], model["steady_state"]
