"""One configuration of a plan: the highest arrival rate at which it meets every SLO, by bisection.

Each evaluation runs the real engine headless on the configuration's deployment scenario at one rate
(`space.deployment`) and keeps, per SLO metric, the value at the SLO's attainment: the q-quantile with
the report's rule (`aisim run`'s p99 is the 0.99 one), so a direct run of the written scenario gives the
same figure. A request that failed counts as missing every request-level objective; with `survive`,
the requests a lost replica held (vLLM's EngineDeadError) are the failure being ridden out and are
counted apart (`lost`), not against the SLO.

The search starts at the workload's rate times the replica count (or `search.start`; the planner starts
a configuration with more replicas from what its sibling with the next fewer replicas carried, scaled,
in steps of 1.1), doubles or halves until one rate passes and one fails, then bisects geometrically until they are within
`search.precision` of each other; the rate 1.1 times the highest passing one must fail too (a run near
the limit is noisy: when it passes, the search goes on above it), so the reported rate meets every SLO
and 1.1 times it misses one, both simulated. With a precision of 10 % or coarser, a bracket within 1.1²
tries 1.1 times the passing rate next instead of the geometric middle: when that fails, it is the
confirmation as well, and the search ends an evaluation earlier. Every rate is evaluated with the same seed (the configuration's), so a
higher rate is the same sample of requests arriving faster.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..engine import ENGINE_DEAD, Simulation
from ..scenario import Scenario
from ..scenario.plan import Objective, Plan
from .space import (
    Config,
    base_rate,
    deployment,
    document_hash,
    infeasibility,
    planned_model,
    rate_text,
)

METRICS = ("ttft", "itl", "tpot", "e2e")
MIN_RATE = 1e-3
"""Below this many requests per second the search gives up on a configuration."""
CONFIRM = 1.1
"""The reported rate is one whose CONFIRM times fails too (evaluated), not only the bisection's neighbour."""
MAX_RATE = 100_000.0
"""Above this the search stops growing the rate (the arrival draws stop at 1000000/s)."""


def quantile(values: np.ndarray, weights: np.ndarray | None, q: float) -> float:
    """The q-quantile of `values` (weighted), with `aisim run`'s percentile rule; inf when empty."""
    if len(values) == 0:
        return math.inf
    if weights is None:
        weights = np.ones(len(values), dtype=np.int64)
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    index = int(np.searchsorted(cumulative, q * int(cumulative[-1]), side="left"))
    return float(values[order][min(index, len(values) - 1)])


def measure(sim: Simulation, plan: Plan) -> dict[str, Any]:
    """What one finished run says about the SLO: each objective's quantile (seconds), counts, throughput."""
    requests = sim.requests
    completed = [r for r in requests if r.outcome == "completed"]
    lost = sum(r.outcome == "failed" and r.error == ENGINE_DEAD for r in requests)
    missed = len(requests) - len(completed) - lost
    inf = [math.inf] * missed
    arrival = np.array([r.arrival for r in completed], dtype=np.float64)
    first = np.array([r.first_token_at if r.first_token_at >= 0 else r.finished_at for r in completed], dtype=np.float64)
    finished = np.array([r.finished_at for r in completed], dtype=np.float64)
    decoded = [r for r in completed if r.generated > 1]
    samples: dict[str, tuple[np.ndarray, np.ndarray | None]] = {
        "ttft": (np.concatenate([first - arrival, inf]), None),
        "e2e": (np.concatenate([finished - arrival, inf]), None),
        "tpot": (np.array([(r.finished_at - r.first_token_at) / (r.generated - 1) for r in decoded] + inf), None),
    }
    engines = [e for served in sim.served_models for e in served.engines]
    values = [np.asarray(v, dtype=np.float64) for e in engines for v in e.stats.itl_values]
    weights = [np.asarray(w, dtype=np.int64) for e in engines for w in e.stats.itl_weights]
    samples["itl"] = (np.concatenate(values), np.concatenate(weights)) if values else (np.array([]), None)
    result: dict[str, Any] = {"requests": len(requests), "completed": len(completed), "failed": missed, "lost": lost}
    for name in METRICS:
        objective: Objective | None = getattr(plan.slo, name)
        if objective is not None:
            value = quantile(*samples[name], objective.attainment)
            result[name] = None if math.isinf(value) else round(value / 1e9, 6)
    span = (finished.max() - min(r.arrival for r in requests)) / 1e9 if completed else 0.0
    result["throughput_rps"] = round(len(completed) / span, 6) if span else 0.0
    result["output_tokens_per_s"] = round(sum(r.generated for r in completed) / span, 3) if span else 0.0
    return result


def misses(metrics: dict[str, Any], plan: Plan) -> list[dict[str, Any]]:
    """The objectives a run misses: metric, measured value and bound (seconds; None when no request completed)."""
    missed = []
    for name in METRICS:
        objective: Objective | None = getattr(plan.slo, name)
        if objective is None:
            continue
        value, bound = metrics.get(name), objective.max / 1e9
        if value is None or value > bound:
            missed.append({"metric": name, "attainment": objective.attainment, "value": value, "max": bound})
    return missed


@dataclass(frozen=True)
class Task:
    """Everything one configuration's search needs, picklable for a process pool or a Ray task."""

    document: dict[str, Any]
    base_dir: str
    config: Config
    cache_dir: str | None
    code: str
    start: float | None = None
    """First rate tried (default: `search.start`, else the workload's rate times the replicas)."""
    step: float = 2.0
    """Factor between the rates tried until one passes and one fails."""


class Cache:
    """Evaluations on disk, one JSON file each under the hash of what it depends on (atomic writes, so an
    interrupted plan leaves only whole entries)."""

    def __init__(self, directory: str | None) -> None:
        self.directory = Path(directory) if directory else None

    def _path(self, key: str) -> Path:
        assert self.directory is not None
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        if self.directory is None:
            return None
        try:
            return json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def put(self, key: str, value: dict[str, Any]) -> None:
        if self.directory is None:
            return
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(value, out)
        os.replace(temporary, path)


def search(task: Task) -> dict[str, Any]:
    """The configuration's result: infeasible with its reason, or its highest rate meeting every SLO and the
    latency-versus-rate curve of the rates visited (`simulations` and `cached` count the evaluations)."""
    scenario = Scenario.model_validate(task.document)
    plan = scenario.plan
    assert plan is not None
    config, base_dir = task.config, Path(task.base_dir)
    model = planned_model(scenario)
    result: dict[str, Any] = {**config.to_dict(), "simulations": 0, "cached": 0}
    reason = infeasibility(model, config, plan.survive)
    if reason:
        return {**result, "status": "infeasible", "reason": reason}
    cache = Cache(task.cache_dir)
    attainments = {name: getattr(plan.slo, name).attainment for name in METRICS if getattr(plan.slo, name)}
    curve: list[dict[str, Any]] = []
    visited: dict[float, dict[str, Any]] = {}

    def evaluate(rate: float) -> dict[str, Any]:
        doc = deployment(task.document, scenario, config, rate, base_dir, plan.survive)
        key = document_hash({"scenario": doc, "attainments": attainments}, base_dir, task.code)
        metrics = cache.get(key)
        if metrics is None:
            metrics = simulate(doc, base_dir, plan)
            cache.put(key, metrics)
            result["simulations"] += 1
        else:
            result["cached"] += 1
        point = {"rate": float(rate_text(rate)[:-2]), **metrics}
        point["meets"] = "failure" not in metrics and not misses(metrics, plan)
        curve.append(point)
        visited[point["rate"]] = point
        return point

    start = task.start or (plan.search.start.per_second if plan.search.start
                           else base_rate(scenario, model, base_dir) * config.replicas)
    start = min(max(start, MIN_RATE), MAX_RATE)  # a sibling's rate scaled up may pass the highest rate searched
    passed, failed = _bracket(evaluate, start, task.step, plan.search.max_evaluations)
    if curve and "failure" in curve[0]:
        return {**result, "status": "infeasible", "reason": curve[0]["failure"], "simulations": result["simulations"],
                "cached": result["cached"]}
    budget = plan.search.max_evaluations
    coarse = plan.search.precision >= CONFIRM - 1 - 1e-9
    """Whether a failure at CONFIRM times the highest passing rate is close enough to stop."""
    while passed and failed and len(curve) < budget:
        ratio = failed["rate"] / passed["rate"]
        confirm = visited.get(float(rate_text(passed["rate"] * CONFIRM)[:-2]))
        if coarse and confirm is not None and not confirm["meets"]:
            break  # converged and confirmed at once
        if ratio - 1 > plan.search.precision:
            if coarse and ratio <= CONFIRM * CONFIRM:
                middle = evaluate(passed["rate"] * CONFIRM)  # when it fails, it is the confirmation too
            else:
                middle = evaluate(math.sqrt(passed["rate"] * failed["rate"]))
        else:  # converged: the rate CONFIRM times higher must fail too (a noisy run may pass above a failure)
            middle = visited.get(float(rate_text(passed["rate"] * CONFIRM)[:-2])) or evaluate(passed["rate"] * CONFIRM)
            if not middle["meets"]:
                break
            failed = None
            passed, failed = _bracket(evaluate, middle["rate"] * 2, 2.0, budget - len(curve), middle)
            continue
        if middle["rate"] in (passed["rate"], failed["rate"]):
            break
        passed, failed = (middle, failed) if middle["meets"] else (passed, middle)
    curve.sort(key=lambda p: p["rate"])
    result["curve"] = curve
    if passed is None:
        lowest = curve[0]
        return {**result, "status": "misses", "closest": lowest, "misses": misses(lowest, plan)}
    return {**result, "status": "meets", "max_rate": passed["rate"], "at_max": passed,
            "next_failing_rate": failed["rate"] if failed else None}


def _bracket(evaluate: Callable[[float], dict[str, Any]], start: float, step: float, budget: int,
             passed: dict[str, Any] | None = None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Multiply or divide by `step` from `start` until one rate passes and a higher one fails (or the budget
    ends, or the rate leaves what the workload can draw); `passed`: a rate below `start` known to pass."""
    failed: dict[str, Any] | None = None
    rate, used = start, 0
    while used < budget and MIN_RATE <= rate <= MAX_RATE:
        point = evaluate(rate)
        used += 1
        if "failure" in point:
            return None, None
        # from the rate as evaluated (rounded), so that a step of CONFIRM lands on the confirmation's rate
        if point["meets"]:
            passed = point
            if failed is not None:
                break
            rate = point["rate"] * step
        else:
            failed = point
            if passed is not None:
                break
            rate = point["rate"] / step
    return passed, failed


def simulate(doc: dict[str, Any], base_dir: Path, plan: Plan) -> dict[str, Any]:
    """Run one deployment scenario headless (no telemetry) and measure it; a model that cannot load
    gives `failure` (its start-up error) instead."""
    scenario = Scenario.model_validate(doc)
    sim = Simulation(scenario, base_dir, telemetry=False)
    failure = next((s.failure or s.crash for s in sim.served_models if s.failure or s.crash), "")
    if failure:
        return {"failure": failure}
    sim.run()
    return measure(sim, plan)
