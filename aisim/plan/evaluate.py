"""One configuration of a plan: the highest arrival rate at which it meets every SLO at steady state.

Each evaluation runs the real engine headless on the configuration's deployment scenario at one rate
(`space.deployment`) until the steady-state judge (`aisim.engine.steady`) decides: it discards the warm-up,
needs `search.requests` measured requests per replica and a span several times the slowest request, puts a
95 % batch-means interval on each SLO percentile, and stops the run as soon as it is overloaded (arrivals
outrun completions) or every interval is clear of its bound, or after `EXTEND` times the minimum count.
A rate *meets* when every interval's upper end is within its bound; it *fails* when it is overloaded or an
interval's lower end is above a bound, or its estimate is; otherwise it is *uncertain* (and not counted as
meeting). A failed
request counts as missing every request-level objective; with `survive`, the requests a lost replica held
(vLLM's EngineDeadError) are the failure being ridden out and are counted apart (`lost`).

The search starts at the workload's rate times the replica count (or `search.start`; the planner starts
a configuration with more replicas from what its sibling with the next fewer replicas carried, scaled,
in steps of 1.1), doubles or halves until one rate passes and one fails (latency grows with the rate, so
one pass below one failure brackets the capacity), then bisects geometrically until they are within
`search.precision` of each other. The capacity is the interval from the highest rate that meets (the
conservative end, `max_rate`, which the ranking uses) to the lowest rate that fails (overloaded, or an
objective's estimate beyond its bound: the optimistic end); when the bisection's failing end is only
uncertain, rates 1.1 times higher are tried until one clearly fails. With a precision of 10 % or coarser,
a bracket within 1.1² tries 1.1 times the passing rate next instead of the geometric middle. Every rate is
evaluated with the same seed (the configuration's), so a higher rate is the same sample of requests
arriving faster.
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

from ..engine import ENGINE_DEAD, Simulation, SteadyRules, run_steady
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
EXTEND = 3
"""An evaluation whose intervals straddle a bound runs up to this many times its minimum count."""
FAILS = ("misses", "overloaded")
"""Statuses of a rate that fails beyond doubt; a rate whose estimate misses a bound fails too (`fails`): the
optimistic end of the capacity is the lowest rate that fails."""


def objectives(plan: Plan) -> dict[str, tuple[float | None, float]]:
    """The SLO as the steady-state judge takes it: metric -> (bound in seconds, attainment)."""
    return {name: (o.max / 1e9, o.attainment) for name in METRICS if (o := getattr(plan.slo, name)) is not None}


def measure(sim: Simulation, plan: Plan, verdict: dict[str, Any]) -> dict[str, Any]:
    """What one run says about the SLO: each objective's quantile over the measured (steady) requests in
    seconds with its interval, the verdict, counts and throughput."""
    requests = sim.requests
    completed = [r for r in requests if r.outcome == "completed"]
    lost = sum(r.outcome == "failed" and r.error == ENGINE_DEAD for r in requests)
    done = sum(r.done for r in requests)
    result: dict[str, Any] = {"requests": len(requests), "completed": len(completed),
                              "failed": done - len(completed) - lost, "lost": lost}
    for name, entry in verdict["metrics"].items():
        result[name] = entry["value"]
    result["status"] = verdict["status"]
    result["steady"] = {
        "warmup_s": verdict["warmup_s"], "measured_requests": verdict["measured_requests"],
        "measured_s": verdict["measured_s"], "simulated_s": verdict["simulated_s"],
        "stopped_early": verdict["stopped_early"], "overloaded_from_s": verdict["overloaded_from_s"],
        "intervals": {name: [e["low"], e["high"]] for name, e in verdict["metrics"].items()},
    }
    finished = [r.finished_at for r in completed]
    span = (max(finished) - min(r.arrival for r in requests)) / 1e9 if completed else 0.0
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
    judged = {"objectives": objectives(plan), "least": plan.search.requests * config.replicas}
    curve: list[dict[str, Any]] = []
    visited: dict[float, dict[str, Any]] = {}

    def evaluate(rate: float) -> dict[str, Any]:
        if float(rate_text(rate)[:-2]) in visited:
            return visited[float(rate_text(rate)[:-2])]
        doc = deployment(task.document, scenario, config, rate, base_dir, plan.survive,
                         EXTEND * plan.search.requests * config.replicas)
        key = document_hash({"scenario": doc, **judged}, base_dir, task.code)
        metrics = cache.get(key)
        if metrics is None:
            metrics = simulate(doc, base_dir, plan, plan.search.requests * config.replicas, rate)
            cache.put(key, metrics)
            result["simulations"] += 1
        else:
            result["cached"] += 1
        point = {"rate": float(rate_text(rate)[:-2]), **metrics}
        point["meets"] = "failure" not in metrics and metrics.get("status") == "meets"
        point["fails"] = "failure" in metrics or metrics.get("status") in FAILS or bool(misses(metrics, plan))
        curve.append(point)
        visited[point["rate"]] = point
        return point

    start = task.start or (plan.search.start.per_second if plan.search.start
                           else base_rate(scenario, model, base_dir) * config.replicas)
    start = min(max(start, MIN_RATE), MAX_RATE)  # a sibling's rate scaled up may pass the highest rate searched
    budget = plan.search.max_evaluations
    passed, failed = _bracket(evaluate, start, task.step, budget)
    if curve and "failure" in curve[0]:
        return {**result, "status": "infeasible", "reason": curve[0]["failure"], "simulations": result["simulations"],
                "cached": result["cached"]}
    coarse = plan.search.precision >= CONFIRM - 1 - 1e-9
    while passed and failed and len(curve) < budget and failed["rate"] / passed["rate"] - 1 > plan.search.precision + 1e-9:
        ratio = failed["rate"] / passed["rate"]
        if coarse and ratio <= CONFIRM * CONFIRM:
            middle = evaluate(passed["rate"] * CONFIRM)
        else:
            middle = evaluate(math.sqrt(passed["rate"] * failed["rate"]))
        if middle["rate"] in (passed["rate"], failed["rate"]):
            break
        passed, failed = (middle, failed) if middle["meets"] else (passed, middle)
    # the optimistic end must clearly fail: above an uncertain failure, rates 1.1 times higher until one does
    while passed and failed and not failed["fails"] and len(curve) < budget and failed["rate"] < MAX_RATE:
        step = failed["rate"] * CONFIRM
        known = [p for p in curve if failed["rate"] < p["rate"] <= step * (1 + 1e-6) and p["fails"]]
        failed = known[0] if known else evaluate(step)  # a rate visited within the step that fails will do
        if failed["meets"]:
            passed = failed
    curve.sort(key=lambda p: p["rate"])
    result["curve"] = curve
    if passed is None:
        lowest = curve[0]
        return {**result, "status": "misses", "closest": lowest, "misses": misses(lowest, plan)}
    above = [p for p in curve if p["rate"] > passed["rate"] and p["fails"]]
    high = above[0]["rate"] if above else (failed["rate"] if failed else None)
    return {**result, "status": "meets", "max_rate": passed["rate"], "at_max": passed,
            "next_failing_rate": failed["rate"] if failed else None,
            "capacity": {"conservative": passed["rate"], "optimistic": high,
                         "optimistic_status": above[0]["status"] if above else (failed["status"] if failed else None)}}


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


def simulate(doc: dict[str, Any], base_dir: Path, plan: Plan, least: int, rate: float) -> dict[str, Any]:
    """Run one deployment scenario headless (no telemetry) until its steady-state verdict is decided, and
    measure it (`least`: measured requests at least); a model that cannot load gives `failure` (its
    start-up error) instead."""
    scenario = Scenario.model_validate(doc)
    sim = Simulation(scenario, base_dir, telemetry=False)
    failure = next((s.failure or s.crash for s in sim.served_models if s.failure or s.crash), "")
    if failure:
        return {"failure": failure}
    # first judged once half the minimum count has arrived, then at growing intervals
    verdict = run_steady(sim, objectives(plan), SteadyRules(min_requests=least), first_check_s=least / rate / 2)
    return measure(sim, plan, verdict)
