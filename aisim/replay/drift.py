"""The drift report: how far a replay's latencies, loads and memory are from the recorded log's.

Requests pair by position (a replay answers the log's requests in the log's order); a metric
compares only the pairs where both sides measured it, over completed requests. Per metric:
- `mean_drift_pct` and `p95_drift_pct`: the replayed distribution's mean and 95th percentile
  against the recorded one's, (replayed - recorded) / recorded x 100;
- `paired_p95_abs_pct`: the 95th percentile, over requests, of |replayed - recorded| / recorded x 100
  (how far single requests stray, which a shifted distribution can hide);
- ITL pools every gap of the paired requests; load latency pairs loads by position.
Memory compares each GPU's footprint at the end (MiB); tensor shapes count KServe answers whose
output shapes differ. A metric passes when |p95 drift| is within its threshold (default 10 %; per
metric with `{"itl": 25, "*": 10}`: wall-clock token gaps of ~10 ms carry a millisecond of timer jitter);
one that has no pairs is not judged (a trace without latencies: the table then shows the replay's
own mean and p95).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .records import LoggedRequest, RequestLog

DEFAULT_THRESHOLD_PCT = 10.0
LATENCIES = ("ttft", "itl", "e2e")


def _pct(replayed: float, recorded: float) -> float | None:
    return None if recorded == 0 else (replayed - recorded) / recorded * 100


def _p95(values: np.ndarray) -> float:
    return float(np.percentile(values, 95))


@dataclass(frozen=True)
class MetricDrift:
    """One metric's recorded and replayed statistics (seconds) and their drift."""

    name: str
    count: int
    recorded_mean: float | None = None
    replayed_mean: float | None = None
    recorded_p95: float | None = None
    replayed_p95: float | None = None
    mean_drift_pct: float | None = None
    p95_drift_pct: float | None = None
    paired_p95_abs_pct: float | None = None
    passed: bool | None = None
    """None: nothing to judge (no pairs)."""

    @classmethod
    def of(cls, name: str, recorded: list[float], replayed: list[float], threshold_pct: float,
           paired: bool = True) -> MetricDrift:
        if not recorded or not replayed:
            if not replayed:
                return cls(name, 0)
            values = np.asarray(replayed, dtype=np.float64)  # nothing recorded: the replay's own figures
            return cls(name, 0, replayed_mean=float(values.mean()), replayed_p95=_p95(values))
        rec, rep = np.asarray(recorded, dtype=np.float64), np.asarray(replayed, dtype=np.float64)
        p95_drift = _pct(_p95(rep), _p95(rec))
        single = None
        if paired and len(rec) == len(rep):
            nonzero = rec != 0
            if nonzero.any():
                single = _p95(np.abs(rep[nonzero] - rec[nonzero]) / rec[nonzero] * 100)
        return cls(name, len(rec), float(rec.mean()), float(rep.mean()), _p95(rec), _p95(rep),
                   _pct(float(rep.mean()), float(rec.mean())), p95_drift, single,
                   None if p95_drift is None else abs(p95_drift) <= threshold_pct)

    def to_dict(self) -> dict[str, Any]:
        return {key: (round(value, 6) if isinstance(value, float) else value) for key, value in self.__dict__.items()}


@dataclass
class DriftReport:
    """Every metric's drift, the memory deltas and the shape mismatches; `passed` when all judged pass."""

    metrics: dict[str, MetricDrift]
    memory_delta_mib: dict[str, float] = field(default_factory=dict)
    shape_checked: int = 0
    shape_mismatches: int = 0
    thresholds: dict[str, float] = field(default_factory=lambda: {"*": DEFAULT_THRESHOLD_PCT})
    """Per metric, |p95 drift| % allowed; "*" for the others."""
    paired_requests: int = 0
    recorded_requests: int = 0
    replayed_requests: int = 0
    by_model: dict[str, dict[str, MetricDrift]] = field(default_factory=dict)
    """The latencies again per model (logs with several), for information: only `metrics` is judged."""

    @property
    def shape_mismatch_rate(self) -> float | None:
        return self.shape_mismatches / self.shape_checked if self.shape_checked else None

    @property
    def passed(self) -> bool:
        return all(m.passed is not False for m in self.metrics.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "thresholds_pct": self.thresholds,
            "passed": self.passed,
            "requests": {"recorded": self.recorded_requests, "replayed": self.replayed_requests,
                         "paired": self.paired_requests},
            "metrics": {name: metric.to_dict() for name, metric in self.metrics.items()},
            "memory_delta_mib": {gpu: round(delta, 3) for gpu, delta in self.memory_delta_mib.items()},
            "tensor_shapes": {"checked": self.shape_checked, "mismatches": self.shape_mismatches,
                              "mismatch_rate": self.shape_mismatch_rate},
            "by_model": {model: {name: metric.to_dict() for name, metric in metrics.items()}
                         for model, metrics in self.by_model.items()},
        }


def _paired(recorded: list[LoggedRequest], replayed: list[LoggedRequest]) -> list[tuple[LoggedRequest, LoggedRequest]]:
    return [(a, b) for a, b in zip(recorded, replayed) if a.completed and b.completed]


def _limit(thresholds: dict[str, float], name: str) -> float:
    return thresholds.get(name, thresholds.get("*", DEFAULT_THRESHOLD_PCT))


def _latencies(pairs: list[tuple[LoggedRequest, LoggedRequest]], replayed: list[LoggedRequest],
               thresholds: dict[str, float]) -> dict[str, MetricDrift]:
    metrics: dict[str, MetricDrift] = {}
    for name in ("ttft", "e2e"):
        both = [(getattr(a, name), getattr(b, name)) for a, b in pairs
                if getattr(a, name) is not None and getattr(b, name) is not None]
        alone = [getattr(b, name) for b in replayed if b.completed and getattr(b, name) is not None]
        metrics[name] = MetricDrift.of(name, [x for x, _ in both], [y for _, y in both] if both else alone,
                                       _limit(thresholds, name))
    gaps = [(a.itl, b.itl) for a, b in pairs if a.itl and b.itl]
    alone_gaps = [g for b in replayed if b.completed and b.itl for g in b.itl]
    metrics["itl"] = MetricDrift.of("itl", [g for a, _ in gaps for g in a],
                                    [g for _, b in gaps for g in b] if gaps else alone_gaps,
                                    _limit(thresholds, "itl"), paired=all(len(a) == len(b) for a, b in gaps))
    return {name: metrics[name] for name in LATENCIES}


def compare(recorded: RequestLog, replayed: RequestLog,
            threshold_pct: float | dict[str, float] = DEFAULT_THRESHOLD_PCT) -> DriftReport:
    """The drift of `replayed` from `recorded` (and, when the log has several models, per model)."""
    thresholds = {"*": threshold_pct} if isinstance(threshold_pct, (int, float)) else dict(threshold_pct)
    pairs = _paired(recorded.requests, replayed.requests)
    metrics = _latencies(pairs, replayed.requests, thresholds)
    loads = [(a.seconds, b.seconds) for a, b in zip(recorded.loads, replayed.loads, strict=False)
             if a.seconds is not None and b.seconds is not None and a.status == b.status == "ok"]
    metrics["load"] = MetricDrift.of("load", [x for x, _ in loads], [y for _, y in loads], _limit(thresholds, "load"))
    memory = {gpu: replayed.memory_mib[gpu] - mib for gpu, mib in recorded.memory_mib.items() if gpu in replayed.memory_mib}
    shaped = [(a.outputs, b.outputs) for a, b in pairs if a.outputs is not None and b.outputs is not None]
    models = sorted({b.model or "" for _, b in pairs})
    by_model = {model: _latencies([(a, b) for a, b in pairs if (b.model or "") == model],
                                  [b for b in replayed.requests if (b.model or "") == model], thresholds)
                for model in models} if len(models) > 1 else {}
    return DriftReport(metrics, memory, len(shaped), sum(x != y for x, y in shaped), thresholds, len(pairs),
                       len(recorded.requests), len(replayed.requests), by_model)


def _cell(value: float | None, scale: float = 1.0, digits: int = 2, sign: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value * scale:+.{digits}f}" if sign else f"{value * scale:.{digits}f}"


def drift_table(report: DriftReport) -> str:
    """The report as a text table (milliseconds and percent)."""
    head = f"{'metric':<8}{'n':>7}{'rec mean':>11}{'rep mean':>11}{'rec p95':>11}{'rep p95':>11}" \
           f"{'mean %':>9}{'p95 %':>9}{'pair p95 %':>12}  verdict"
    limits = ", ".join(f"{k} {v:g} %" if k != "*" else f"{v:g} %" for k, v in report.thresholds.items())
    lines = [(f"drift (ms; |p95 %| allowed: {limits}); requests: {report.recorded_requests} recorded, "
             f"{report.replayed_requests} replayed, {report.paired_requests} completed in both"), head]
    for metric in report.metrics.values():
        verdict = {True: "pass", False: "FAIL", None: "n/a"}[metric.passed]
        lines.append(f"{metric.name:<8}{metric.count:>7}{_cell(metric.recorded_mean, 1e3):>11}"
                     f"{_cell(metric.replayed_mean, 1e3):>11}{_cell(metric.recorded_p95, 1e3):>11}"
                     f"{_cell(metric.replayed_p95, 1e3):>11}{_cell(metric.mean_drift_pct, sign=True):>9}"
                     f"{_cell(metric.p95_drift_pct, sign=True):>9}{_cell(metric.paired_p95_abs_pct):>12}  {verdict}")
    for model, latencies in report.by_model.items():
        parts = [f"{m.name} p95 {_cell(m.recorded_p95, 1e3)} -> {_cell(m.replayed_p95, 1e3)} ms "
                 f"({_cell(m.p95_drift_pct, sign=True)} %)" for m in latencies.values() if m.count]
        lines.append(f"  {model}: " + ("; ".join(parts) if parts else "no pairs"))
    for gpu, delta in report.memory_delta_mib.items():
        lines.append(f"memory footprint {gpu}: {delta:+.1f} MiB")
    rate = report.shape_mismatch_rate
    lines.append("tensor shapes: " + ("none compared" if rate is None
                                      else f"{report.shape_mismatches}/{report.shape_checked} mismatched ({rate:.1%})"))
    judged = any(m.passed is not None for m in report.metrics.values())
    lines.append(("PASS" if report.passed else "FAIL") if judged else "nothing to judge: the log has no latencies to compare")
    return "\n".join(lines) + "\n"
