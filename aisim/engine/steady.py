"""Steady state of a run: is what it measured the service's lasting behaviour, or a transient, or an overload?

A latency SLO is a promise about a service that runs for hours, so a run is judged on its steady state:

* **Overload.** The waiting queue (requests arrived, not yet scheduled) and the requests in the system are
  counted at `CHECKPOINTS` times across the run. Over its second half, when the waiting queue grows by more
  than `Rules.growth` of the requests that arrived meanwhile (arrivals outrun completions; a KV cache too
  small for the load preempts requests back into the same queue) and the mean TTFT of the requests
  served there trends up, the run is overloaded, from the last checkpoint at which the queue was still
  short (a tenth of its final length). An overloaded run fails any SLO.
* **Warm-up.** The first requests meet an empty server; MSER-5 (White 1997: the truncation that minimises
  the standard error of the remaining batch means of 5) on TTFT in arrival order says how many to discard.
* **Enough data.** After the warm-up the run must hold `Rules.min_requests` requests and last
  `Rules.min_spans` times its slowest measured request (so a tail made of a few long requests is seen
  several times over).
* **A confidence interval on each percentile** (batch means, by sectioning): the point estimate is the
  percentile of every measured sample; the requests are cut into `Rules.batches` consecutive batches
  (the token gaps of ITL into as many equal slices of time, from when the batch has filled: the 90th
  percentile's E2E after the first arrival), and the spread of the batches' percentiles
  gives a 95 % Student-t interval around it. An objective is met when the interval's upper end is within
  its bound, missed when its lower end is above it, and uncertain otherwise.

Only requests that arrived before the earliest one still unfinished are measured, so a run stopped early
(`run_steady`) leaves no slow request out. The planner (`aisim.plan`) runs each rate with `run_steady`,
which stops a run as soon as the verdict is decided; `aisim run` judges its finished run with `judge`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .kernel import VirtualClock
from .replica import ENGINE_DEAD
from .request import Request
from .served import Engine
from .simulation import Simulation

NS = 1e9
CHECKPOINTS = 20
"""Times across the run at which the requests in the system are counted (overload detection)."""
MSER_BATCH = 5
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 14: 2.145, 19: 2.093, 29: 2.045}
"""Student's t 0.975-quantile by degrees of freedom (a 95 % two-sided interval)."""


@dataclass(frozen=True)
class Rules:
    """What a steady state needs; the defaults are the planner's and `aisim run`'s."""

    batches: int = 10
    """Batches of the batch-means interval."""
    min_requests: int = 200
    """Measured requests (after the warm-up) at least."""
    min_spans: float = 3.0
    """The measured span lasts at least this many times the slowest measured request (arrival to end)."""
    growth: float = 0.05
    """Overloaded when the requests in the system grow by more than this share of the arrivals meanwhile."""
    min_growth: int = 20
    """... and by at least this many requests (a few requests are noise)."""


@dataclass
class Samples:
    """The timestamps a judgement reads (ns; -1: not yet), in arrival order, taken `now`."""

    arrival: np.ndarray
    scheduled: np.ndarray
    first: np.ndarray
    finished: np.ndarray
    completed: np.ndarray
    lost: np.ndarray
    generated: np.ndarray
    itl_values: np.ndarray
    itl_weights: np.ndarray
    itl_times: np.ndarray
    now: int


class Collector:
    """Takes `Samples` of a running simulation again and again cheaply: one pass over the requests, and only
    the token gaps recorded since the last time converted."""

    def __init__(self, requests: list[Request], engines: Iterable[Engine]) -> None:
        self.requests = requests
        self.engines = list(engines)
        self.seen = [0] * len(self.engines)
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def __call__(self, now: int) -> Samples:
        for index, engine in enumerate(self.engines):
            stats = engine.stats
            times = getattr(stats, "itl_times", ())
            fresh = range(self.seen[index], len(times))
            self.seen[index] = len(times)
            for k in fresh:
                v = np.asarray(stats.itl_values[k], dtype=np.int64)
                self.parts.append((v, np.asarray(stats.itl_weights[k], dtype=np.int64),
                                   np.broadcast_to(np.asarray(times[k], dtype=np.int64), v.shape)))
        if len(self.parts) > 1:
            values, weights, times = (np.concatenate([p[i] for p in self.parts]) for i in range(3))
            self.parts = [(values, weights, times)]
        itl = self.parts[0] if self.parts else (np.zeros(0, dtype=np.int64),) * 3
        table = np.array([(r.arrival, r.scheduled_at, r.first_token_at, r.finished_at, r.generated,
                           r.outcome == "completed", r.outcome == "failed" and r.error == ENGINE_DEAD)
                          for r in self.requests], dtype=np.int64).reshape(-1, 7)
        table = table[np.argsort(table[:, 0], kind="stable")]
        return Samples(table[:, 0], table[:, 1], table[:, 2], table[:, 3], table[:, 5].astype(bool),
                       table[:, 6].astype(bool), table[:, 4], itl[0], itl[1], itl[2], now)


def collect(requests: list[Request], engines: Iterable[Engine], now: int) -> Samples:
    """The samples of `requests` (and their engines' token gaps) as of `now`."""
    return Collector(requests, engines)(now)


def quantile(values: np.ndarray, weights: np.ndarray | None, q: float) -> float:
    """The q-quantile of `values` (weighted) with the report's percentile rule; inf when empty."""
    if len(values) == 0:
        return math.inf
    if weights is None:
        weights = np.ones(len(values), dtype=np.int64)
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    index = int(np.searchsorted(cumulative, q * int(cumulative[-1]), side="left"))
    return float(values[order][min(index, len(values) - 1)])


def _t(freedom: int) -> float:
    known = [k for k in T_975 if k <= freedom]
    return T_975[max(known)] if known else T_975[1]


def overload(samples: Samples, rules: Rules) -> dict[str, Any]:
    """Whether arrivals outrun completions over the run's second half, from when, and the counts it read."""
    now, arrival = samples.now, samples.arrival
    done = np.sort(np.where(samples.finished >= 0, samples.finished, np.iinfo(np.int64).max))
    began = np.where(samples.scheduled >= 0, samples.scheduled, samples.finished)
    started = np.sort(np.where(began >= 0, began, np.iinfo(np.int64).max))
    start = int(arrival[0]) if len(arrival) else 0
    now = min(now, int(arrival[-1])) if len(arrival) else now  # while requests arrive: a drain is no overload
    times = [start + (now - start) * j // CHECKPOINTS for j in range(1, CHECKPOINTS + 1)]
    arrived = np.searchsorted(arrival, times, side="right")
    in_system = arrived - np.searchsorted(done, times, side="right")
    waiting = arrived - np.searchsorted(started, times, side="right")
    result: dict[str, Any] = {"overloaded": False, "from_s": None,
                              "in_system": in_system.tolist(), "waiting": waiting.tolist(),
                              "at_s": [round(t / NS, 3) for t in times]}
    if len(arrival) < 2 or now <= start:
        return result
    half = CHECKPOINTS // 2 - 1
    # the waiting queue, not the requests in the system, whose level rises for as long as the slowest
    # request lasts even at a light load
    grown = int(waiting[-1] - waiting[half])
    came = int(arrived[-1] - arrived[half])
    if grown <= max(rules.min_growth, rules.growth * came) or np.polyfit(range(half, CHECKPOINTS), waiting[half:], 1)[0] <= 0:
        return result
    # TTFT trend: the requests that got their first token late in the stretch waited longer than those served
    # early in it (grouped by when they were served, so a request still waiting biases nothing)
    served = np.where(samples.first >= 0, samples.first, samples.finished)
    middle = times[half + (CHECKPOINTS - half) // 2]
    ttft = served - arrival
    early = ttft[(served > times[half]) & (served <= middle)]
    late = ttft[(served > middle) & (served <= now)]
    if len(early) and len(late) and late.mean() <= early.mean():
        return result
    # from the last time the queue was short (a tenth of its final length) before it grew for good
    low = max(rules.min_growth, int(waiting[-1]) // 10)
    since = max((j for j in range(CHECKPOINTS - 1) if waiting[j] <= low), default=-1)
    result.update(overloaded=True, from_s=round(((times[since] if since >= 0 else start) - start) / NS, 3))
    return result


def _warmup(ttft: np.ndarray) -> int:
    """Requests to discard (MSER-5 on the TTFTs in arrival order, truncated within the first half)."""
    count = len(ttft) // MSER_BATCH
    if count < 4:
        return 0
    means = ttft[:count * MSER_BATCH].reshape(count, MSER_BATCH).mean(axis=1)
    best, chosen = math.inf, 0
    for d in range(count // 2 + 1):
        rest = means[d:]
        value = float(((rest - rest.mean()) ** 2).sum()) / len(rest) ** 2
        if value < best:
            best, chosen = value, d
    return chosen * MSER_BATCH


def judge(samples: Samples, objectives: Mapping[str, tuple[float | None, float]], rules: Rules = Rules(),
          quick: bool = False) -> dict[str, Any]:
    """The verdict on a run (finished or not): `objectives` maps ttft, itl, tpot or e2e to (bound in seconds
    or None, attainment). `status`: overloaded, unsettled (not enough steady data yet), meets, misses or
    uncertain (an interval straddles a bound); `decided`: whether running longer could change it."""
    load = overload(samples, rules)
    kept = ~samples.lost
    unfinished = kept & (samples.finished < 0)
    cut = int(samples.arrival[unfinished].min()) if unfinished.any() else np.iinfo(np.int64).max
    measured = kept & (samples.arrival < cut)
    index = np.flatnonzero(measured)
    arrival = samples.arrival[index]
    ok = samples.completed[index]
    first = np.where(samples.first[index] >= 0, samples.first[index], samples.finished[index])
    ttft = np.where(ok, first - arrival, np.inf).astype(np.float64)
    skip = _warmup(np.where(np.isinf(ttft), np.nanmax(np.where(np.isinf(ttft), 0, ttft), initial=0), ttft))
    index, arrival, ok, ttft = index[skip:], arrival[skip:], ok[skip:], ttft[skip:]
    e2e = np.where(ok, samples.finished[index] - arrival, np.inf).astype(np.float64)
    start = int(arrival[0]) if len(arrival) else samples.now
    end = int(arrival[-1]) if len(arrival) else samples.now
    slowest = float(np.max(e2e[ok])) if ok.any() else 0.0
    verdict: dict[str, Any] = {
        "warmup_requests": skip,
        "warmup_s": round((start - int(samples.arrival[0])) / NS, 3) if len(samples.arrival) else 0.0,
        "measured_requests": len(index),
        "measured_s": round((end - start) / NS, 3),
        "slowest_s": round(slowest / NS, 3),
        "overloaded": load["overloaded"],
        "overloaded_from_s": load["from_s"],
        "load": {k: load[k] for k in ("at_s", "in_system", "waiting")},
    }
    enough = len(index) >= max(rules.min_requests, rules.batches * 2) and end - start >= rules.min_spans * slowest
    verdict["steady"] = bool(enough and not load["overloaded"])
    if quick and (load["overloaded"] or not enough):  # decided, or not yet: no interval to work out
        verdict.update(status="overloaded" if load["overloaded"] else "unsettled", decided=load["overloaded"])
        return verdict
    decoded = ok & (samples.generated[index] > 1)
    gaps = (samples.finished[index] - first[skip:]) / np.maximum(samples.generated[index] - 1, 1)
    tpot = np.where(decoded, gaps, np.where(ok, np.nan, np.inf))
    series = {"ttft": ttft, "e2e": e2e, "tpot": tpot[~np.isnan(tpot)]}
    bounds = np.linspace(start, end, rules.batches + 1)
    metrics: dict[str, Any] = {}
    for name, (bound, attainment) in objectives.items():
        if name == "itl":
            # the batch fills for as long as requests last: token gaps count once the typical request
            # (the 90th percentile's E2E) has had time to run from the first arrival
            full = int(samples.arrival[0]) + (int(np.quantile(e2e[ok], 0.9)) if ok.any() else 0)
            begin = min(max(start, full), end)
            bounds = np.linspace(begin, end, rules.batches + 1)
            inside = (samples.itl_times >= begin) & (samples.itl_times <= max(end, begin))
            values, weights, times = (samples.itl_values[inside].astype(np.float64), samples.itl_weights[inside],
                                      samples.itl_times[inside])
            slices = np.clip(np.searchsorted(bounds, times, side="right") - 1, 0, rules.batches - 1)
            parts = [(values[slices == b], weights[slices == b]) for b in range(rules.batches)]
            point = quantile(values, weights, attainment)
        else:
            values = series[name]
            parts = [(p, None) for p in np.array_split(values, rules.batches)]
            point = quantile(values, None, attainment)
        batch = np.array([quantile(v, w, attainment) for v, w in parts if len(v)])
        finite = batch[np.isfinite(batch)]
        if math.isinf(point) or len(finite) < len(batch) or len(batch) < 2:
            half = math.inf
        else:
            half = _t(len(batch) - 1) * float(np.std(finite, ddof=1)) / math.sqrt(len(batch))
        entry: dict[str, Any] = {"attainment": attainment, "value": _seconds(point),
                                 "low": _seconds(max(point - half, 0.0) if math.isfinite(half) else 0.0),
                                 "high": _seconds(point + half)}
        if bound is not None:
            entry["max"] = bound
            high, low = point + half, point - half
            entry["verdict"] = ("meets" if high / NS <= bound else "misses" if math.isfinite(point) and low / NS > bound
                                else "misses" if math.isinf(point) and len(index) else "uncertain")
        metrics[name] = entry
    verdict["metrics"] = metrics
    verdicts = [m["verdict"] for m in metrics.values() if "verdict" in m]
    if load["overloaded"]:
        status = "overloaded"
    elif not enough:
        status = "unsettled"
    elif "misses" in verdicts:
        status = "misses"
    elif all(v == "meets" for v in verdicts):
        status = "meets"
    else:
        status = "uncertain"
    verdict["status"] = status
    verdict["decided"] = status in ("overloaded", "misses", "meets")
    return verdict


def _seconds(value_ns: float) -> float | None:
    return None if math.isinf(value_ns) else round(value_ns / NS, 6)


def run_steady(sim: Simulation, objectives: Mapping[str, tuple[float | None, float]], rules: Rules = Rules(),
               first_check_s: float = 5.0) -> dict[str, Any]:
    """Run `sim` on the virtual clock, judging it at growing intervals (the first after `first_check_s`
    simulated seconds), until the verdict is decided or the workload is spent; the last verdict, with
    `stopped_early` and the simulated seconds."""
    sim.start_workload()
    clock = VirtualClock(sim.kernel)
    kernel = sim.kernel
    samples = Collector(sim.requests, [e for served in sim.served_models for e in served.engines])
    first = max(int(first_check_s * NS), 1)
    check = first
    while True:
        clock.run(check)
        spent = kernel.peek() is None
        verdict = judge(samples(kernel.now), objectives, rules, quick=not spent)
        if verdict["decided"] or spent:
            if "metrics" not in verdict:
                verdict = judge(samples(kernel.now), objectives, rules)
            verdict["stopped_early"] = not spent
            verdict["simulated_s"] = round(kernel.now / NS, 3)
            return verdict
        check += max(first, check // 3)
