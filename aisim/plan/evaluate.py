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

First, one replica of the configuration runs saturated (`saturation`: a burst of requests that all wait
from the start): its completions per second while requests still wait are the most it can carry, and
`HEADROOM` times that, times the replicas, is the configuration's ceiling: a rate there or above is
overloaded (arrivals outrun the most the replicas can complete) and is never simulated. Siblings with
more replicas reuse the measurement (the router keeps every saturated replica busy).

The search starts at the workload's rate times the replica count, or half the ceiling when that is less
(or `search.start`; the planner starts a configuration with more replicas from what its sibling with the
next fewer replicas carried, scaled, in steps of 1.1), doubles or halves until one rate meets and a higher
one does not (latency grows with the rate; the ceiling does not), then bisects geometrically until they
are within `search.precision` of each other (with a precision of 10 % or coarser, a bracket within 1.1²
tries 1.1 times the passing rate next). The capacity is the interval from the highest rate that meets (the
conservative end, `max_rate`, which the ranking uses) to the lowest rate that clearly fails (overloaded, or
an objective's estimate beyond its bound: the optimistic end; the ceiling when no rate simulated does).
Between them lie the rates whose verdict was uncertain; the optimistic end is narrowed to
`search.precision` too, by trying where the point estimates' trend crosses a bound (slightly above, so that a
failure there closes the interval), or the geometric middle when that is nearer. Every rate is evaluated
with the same seed (the configuration's), so a higher rate is the same sample of requests arriving faster.
"""

from __future__ import annotations

import dataclasses
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
HEADROOM = 1.05
"""From this many times the replicas' saturated throughput a rate is overloaded without a run."""
BURST = 1000.0
"""Arrival rate of the saturated run (requests/s): every request waits from the start."""
SATURATION_REQUESTS = 500
"""Requests of the saturated run at least (four times the batch when that is more, up to four times this)."""
TREND_MARGIN = 1.02
"""The optimistic end's search tries this much above where the latency trend crosses a bound."""
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
    saturated: float | None = None
    """Saturated throughput of one replica (`saturation`), when a sibling measured it."""


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
    latency-versus-rate curve of the rates visited (`simulations` and `cached` count the evaluations, the
    saturated run included)."""
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
    saturated = task.saturated
    if saturated is None:
        measured, fresh = saturation(task, scenario, cache)
        result["simulations" if fresh else "cached"] += 1
        if "failure" in measured:
            return {**result, "status": "infeasible", "reason": measured["failure"]}
        saturated = measured["rate"]
        result["saturation"] = measured
    ceiling = ceiling_rate(saturated, config.replicas)
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
                           else min(base_rate(scenario, model, base_dir) * config.replicas, ceiling / 2))
    # a sibling's rate scaled up may pass the highest rate searched, or the ceiling
    start = min(max(start, MIN_RATE), MAX_RATE, ceiling / task.step)
    budget = plan.search.max_evaluations
    passed = _bracket(evaluate, start, task.step, budget, ceiling)
    if curve and "failure" in curve[0]:
        return {**result, "status": "infeasible", "reason": curve[0]["failure"]}

    def lowest(above: float, failing: bool) -> tuple[float, dict[str, Any] | None]:
        """The lowest rate above `above` that does not meet (`failing`: that clearly fails), the ceiling
        (overloaded without a run) when none visited does."""
        found = [p for p in curve if p["rate"] > above and not p["meets"] and (p["fails"] or not failing)]
        low = min(found, key=lambda p: p["rate"]) if found else None
        return (low["rate"], low) if low and low["rate"] < ceiling else (ceiling, None)

    coarse = plan.search.precision >= CONFIRM - 1 - 1e-9
    precision = plan.search.precision + 1e-9
    settled: float | None = None  # the conservative end, once no new rate lies between it and its neighbour
    while passed is not None and len(curve) < budget:
        before = len(curve)
        up = lowest(passed["rate"], failing=False)[0]
        high = lowest(passed["rate"], failing=True)[0]
        if up / passed["rate"] - 1 > precision and settled != passed["rate"]:
            # the conservative end: bisect between the highest rate that meets and the lowest above it that
            # does not
            point = evaluate(passed["rate"] * CONFIRM if coarse and up / passed["rate"] <= CONFIRM * CONFIRM
                             else math.sqrt(passed["rate"] * up))
        else:
            # the optimistic end: the lowest rate that clearly fails (overloaded, or an estimate beyond a
            # bound), between the highest rate visited that does not (an uncertain verdict) and the lowest
            # visited that does (or the ceiling): where the estimates' trend crosses a bound, else the
            # geometric middle
            below = max(p["rate"] for p in curve if p["rate"] < high and not p["fails"])
            if high / below - 1 <= precision:
                break
            closing = below * (1 + plan.search.precision) * (1 - 1e-4)  # a failure here ends the search
            trend = crossing([p for p in curve if p["rate"] <= below and not p["fails"]], plan)
            point = evaluate(min(max(trend * TREND_MARGIN, closing), math.sqrt(below * high)))
        if len(curve) == before:  # the rates are as close as their four decimals allow
            if settled == passed["rate"]:
                break
            settled = passed["rate"]
            continue
        if point["meets"] and passed["rate"] < point["rate"] < high:
            passed = point  # the highest rate that meets, wherever the search found it
    curve.sort(key=lambda p: p["rate"])
    result["curve"] = curve
    if passed is None:
        if not curve:  # the ceiling is below the lowest rate searched
            return {**result, "status": "misses", "closest": {"rate": ceiling, "status": "overloaded"},
                    "misses": [], "reason": f"overloaded at every rate: at most {ceiling:.3g}/s"}
        lowest_point = curve[0]
        return {**result, "status": "misses", "closest": lowest_point, "misses": misses(lowest_point, plan)}
    high, failing = lowest(passed["rate"], failing=True)
    status = failing["status"] if failing else "overloaded"
    return {**result, "status": "meets", "max_rate": passed["rate"], "at_max": passed,
            "next_failing_rate": high,
            "capacity": {"conservative": passed["rate"], "optimistic": high, "optimistic_status": status,
                         "ceiling": ceiling}}


def crossing(points: list[dict[str, Any]], plan: Plan) -> float:
    """Where the point estimates of the two highest rates among `points`, extended in a straight line, first
    reach an objective's bound (inf when none rises towards its bound)."""
    points = sorted(points, key=lambda p: p["rate"])
    found = math.inf
    for name, (bound, _attainment) in objectives(plan).items():
        if bound is None:
            continue
        known = [(p["rate"], p[name]) for p in points if p.get(name) is not None]
        if len(known) < 2:
            continue
        (r1, v1), (r2, v2) = known[-2:]
        if v2 > v1 and r2 > r1:
            found = min(found, r2 + (bound - v2) * (r2 - r1) / (v2 - v1))
    return found


def ceiling_rate(saturated: float, replicas: int) -> float:
    """The rate from which `replicas` replicas are overloaded without a run: HEADROOM times their saturated
    throughput (`saturated` per replica; the router keeps every replica busy when all are saturated)."""
    return float(rate_text(HEADROOM * saturated * replicas)[:-2])


def _bracket(evaluate: Callable[[float], dict[str, Any]], start: float, step: float, budget: int,
             ceiling: float) -> dict[str, Any] | None:
    """Multiply or divide by `step` from `start` until one rate passes and a higher one does not (the ceiling
    does not), or the budget ends, or the rate leaves what the workload can draw; the highest rate that
    passed."""
    passed: dict[str, Any] | None = None
    failed = False
    rate, used = start, 0
    while used < budget and MIN_RATE <= rate <= MAX_RATE:
        point = evaluate(rate)
        used += 1
        if "failure" in point:
            return None
        # from the rate as evaluated (rounded), so that a step of CONFIRM lands on the confirmation's rate
        if point["meets"]:
            passed = point
            rate = point["rate"] * step
            if failed or rate >= ceiling:
                break
        else:
            failed = True
            if passed is not None:
                break
            rate = point["rate"] / step
    return passed


def saturation(task: Task, scenario: Scenario, cache: Cache) -> tuple[dict[str, Any], bool]:
    """One replica of the configuration saturated: SATURATION_REQUESTS (or four times its batch) arriving in a
    burst, its completions per second while requests still wait (`rate`); (that, whether it was simulated).
    `scenario`: the task's document, validated."""
    one = dataclasses.replace(task.config, replicas=1)
    base_dir = Path(task.base_dir)
    count = min(max(SATURATION_REQUESTS, 4 * (one.max_num_seqs or 256)), 4 * SATURATION_REQUESTS)
    doc = deployment(task.document, scenario, one, BURST, base_dir, 0, count)
    key = document_hash({"saturation": doc}, base_dir, task.code)
    measured = cache.get(key)
    if measured is not None:
        return measured, False
    sim = Simulation(Scenario.model_validate(doc), base_dir, telemetry=False)
    failure = next((s.failure or s.crash for s in sim.served_models if s.failure or s.crash), "")
    if failure:
        measured = {"failure": failure}
    else:
        sim.run()
        measured = {"rate": round(saturated_rate(sim.requests), 6), "requests": len(sim.requests)}
    cache.put(key, measured)
    return measured, True


def saturated_rate(requests: list[Any]) -> float:
    """Completions per second from the tenth completion on while some request still waited to be scheduled
    (the batch full), else over the middle of the completions."""
    finished = sorted(r.finished_at for r in requests if r.outcome == "completed")
    if len(finished) < 10:
        return MIN_RATE
    waiting_until = max(r.scheduled_at for r in requests)
    begin = finished[len(finished) // 10]
    inside = sum(begin < f <= waiting_until for f in finished)
    if inside < len(finished) // 4:
        first, last = len(finished) // 10, len(finished) // 2
        return (last - first) / max((finished[last] - finished[first]) / 1e9, 1e-9)
    return inside / ((waiting_until - begin) / 1e9)


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
