"""Capacity planning (`aisim plan`): the cheapest deployment that meets a latency SLO.

    result = plan_file("scenarios/plan-llama3-8b.yaml")       # a JSON-ready dict
    result["answer"]["text"]

The scenario's `plan:` section (`aisim.scenario.plan`) gives the search space, the SLO and the goal;
`space` builds each configuration's deployment scenario, `evaluate` searches its highest rate within the
SLO on the real engine, `execute` runs the searches (serial, process pool, Ray) with an on-disk cache,
and `ranking` turns the results into the answer. The configurations run in rounds by replica count; from
the second round on, one that could not rank above the best found so far even carrying its throughput
ceiling (`evaluate.ceiling_rate`) is pruned: listed, not simulated (`prune=False` evaluates it).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ..scenario import Scenario, check_file
from ..scenario.source import parse
from .evaluate import CONFIRM, Task, ceiling_rate
from .execute import Progress, code_version, run_tasks
from .ranking import (
    answer,
    enrich,
    pareto,
    pruned,
    score,
    upper_bound,
    winner_deployment,
)
from .space import (
    Config,
    PlanError,
    base_rate,
    configurations,
    infeasibility,
    planned_model,
    workload_lines,
)

__all__ = ["PlanError", "plan_file", "plan_scenario"]


SIBLING_STEP = CONFIRM
"""Search step of a configuration started from a sibling's rate: it starts close (replicas scale nearly
linearly), and a bracket one CONFIRM step wide is its own confirmation (`evaluate.search`), so a good
start costs two evaluations."""


def _sibling(config: Config) -> Config:
    """The configuration without its replica count (the same for every count)."""
    return dataclasses.replace(config, replicas=0)


def _start(sibling: tuple[dict[str, Any], int] | None, config: Config) -> tuple[float | None, float]:
    """Where a configuration's search starts: the rate of its sibling with the most replicas below its own
    that met the SLO, scaled by the replicas (the search is the same whichever runs it, so results stay
    identical serial or not); the workload's rate, doubling, without one."""
    if sibling is None:
        return None, 2.0
    result, replicas = sibling
    return result["max_rate"] * config.replicas / replicas, SIBLING_STEP


def raw_document(path: str | Path) -> dict[str, Any]:
    """The scenario file as plain JSON data (what the deployment scenarios are edited from)."""
    text = Path(path).read_text(encoding="utf-8")
    return json.loads(json.dumps(parse(text, str(path)).data))


def absolute_paths(document: dict[str, Any], scenario: Scenario) -> dict[str, Any]:
    """The document with its models' `config` and the plan's `space.models` as the validated scenario resolved
    them (absolute): each configuration's deployment is validated again where the scenario's folder is unknown
    (a pool worker, a Ray node)."""
    document = {**document, "models": [dict(m) if isinstance(m, dict) else m for m in document.get("models", [])]}
    for raw, model in zip(document["models"], scenario.models):
        if isinstance(raw, dict) and model.config is not None and raw.get("config") is not None:
            raw["config"] = model.config
    plan = scenario.plan
    if plan is not None and plan.space.models and isinstance(document.get("plan"), dict):
        space = {**document["plan"]["space"], "models": list(plan.space.models)}
        document["plan"] = {**document["plan"], "space": space}
    return document


def plan_file(path: str | Path, jobs: int | None = None, ray_address: str | None = None,
              cache_dir: str | None = None, progress: Progress | None = None, prune: bool = True) -> dict[str, Any]:
    """Validate the scenario at `path` and plan it (raises ScenarioError or PlanError)."""
    checked = check_file(path)
    if checked.scenario is None:
        from ..scenario import ScenarioError
        raise ScenarioError(checked.problems)
    return plan_scenario(raw_document(path), checked.scenario, checked.base_dir, jobs, ray_address, cache_dir, progress,
                         prune)


def plan_scenario(document: dict[str, Any], scenario: Scenario, base_dir: Path, jobs: int | None = None,
                  ray_address: str | None = None, cache_dir: str | None = None,
                  progress: Progress | None = None, prune: bool = True) -> dict[str, Any]:
    """Plan a validated scenario; `document` is its raw data. `prune`: leave out the configurations that cannot
    beat the best found so far even at their throughput ceiling (`ranking.pruned`)."""
    plan = scenario.plan
    if plan is None:
        raise PlanError("the scenario has no plan section")
    model = planned_model(scenario)
    rate = base_rate(scenario, model, base_dir)
    configs = configurations(plan, model)
    document = absolute_paths(document, scenario)
    code = code_version()

    def run(chosen: list[Task], done: int) -> list[dict[str, Any]]:
        told = (lambda n, _, result: progress(done + n, len(configs), result)) if progress else None
        return run_tasks(chosen, jobs, ray_address, told)

    # One round per replica count, fewest first: each configuration starts from its sibling of the round before
    # and takes its saturated throughput; one that cannot beat the best found so far is pruned.
    found: dict[Config, dict[str, Any]] = {}
    siblings: dict[Config, tuple[dict[str, Any], int]] = {}
    saturated: dict[Config, float] = {}
    best: dict[str, Any] | None = None
    for count in sorted({c.replicas for c in configs}):
        chosen = []
        for c in configs:
            if c.replicas != count:
                continue
            known = saturated.get(_sibling(c))
            if prune and best is not None and known is not None and not infeasibility(model, c, plan.survive) \
                    and score(upper_bound(c, ceiling_rate(known, c.replicas), plan), plan) < score(best, plan):
                found[c] = pruned(c, ceiling_rate(known, c.replicas), best)
                if progress:
                    progress(len(found), len(configs), found[c])
                continue
            chosen.append(Task(document, str(base_dir), c, cache_dir, code, *_start(siblings.get(_sibling(c)), c),
                               saturated=known))
        for task, result in zip(chosen, run(chosen, len(found))):
            found[task.config] = result
            if "saturation" in result:
                saturated[_sibling(task.config)] = result["saturation"]["rate"]
            if result.get("status") == "meets":
                siblings[_sibling(task.config)] = (result, count)
                rich = enrich(result, plan)
                if rich["carries_target"] and (best is None or score(rich, plan) > score(best, plan)):
                    best = rich
    results = [enrich(found[c], plan) for c in configs]
    order = sorted(range(len(results)), key=lambda i: score(results[i], plan), reverse=True)
    ranked = [results[i] for i in order]
    for rank, result in enumerate(ranked, 1):
        result["rank"] = rank
    verdict = answer(ranked, plan)
    output: dict[str, Any] = {
        "scenario": scenario.metadata.name,
        "model": model.id,
        "goal": plan.goal,
        "target_rate": plan.target_rate.per_second if plan.target_rate else None,
        "survive": plan.survive,
        "slo": {name: {"max_s": o.max / 1e9, "attainment": o.attainment}
                for name in ("ttft", "itl", "tpot", "e2e") if (o := getattr(plan.slo, name)) is not None},
        "workload_rate": round(rate, 6),
        "workload": workload_lines(document, model.names),
        "requests_per_evaluation": plan.search.requests,
        "prices": {gpu: plan.price_source(gpu) for gpu in plan.space.gpus},
        "answer": verdict,
        "pareto": pareto(ranked),
        "configurations": ranked,
        "execution": {"configurations": len(ranked),
                      "infeasible": sum(r["status"] == "infeasible" for r in ranked),
                      "pruned": sum(r["status"] == "pruned" for r in ranked),
                      "simulations": sum(r["simulations"] for r in ranked),
                      "cached": sum(r["cached"] for r in ranked)},
    }
    if verdict["winner"]:
        winner = next(r for r in ranked if r["key"] == verdict["winner"])
        output["winner_scenario"], output["vllm_serve"] = winner_deployment(document, scenario, winner, base_dir)
    return output
