"""The `aisim replay` and `aisim calibrate` commands (the CLI parses, these run)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..extras import require
from ..scenario import check_file, render_text
from .drift import DEFAULT_THRESHOLD_PCT, DriftReport, compare, drift_table
from .formats import LogError, read_log, write_log
from .records import RequestLog
from .simulate import ReplayError, SimulationReplay


def _scenario(path: str, command: str) -> Any:
    checked = check_file(path)
    sys.stderr.write(render_text(checked.problems))
    if checked.scenario is None:
        sys.stderr.write(f"aisim {command}: {path}: invalid scenario\n")
    return checked


def thresholds(words: list[str] | None) -> dict[str, float]:
    """`--threshold 10 --threshold itl=25` -> {"*": 10, "itl": 25} (default: 10 % for every metric)."""
    chosen = {"*": DEFAULT_THRESHOLD_PCT}
    for word in words or []:
        name, _, value = word.rpartition("=")
        chosen[name or "*"] = float(value)
    return chosen


def _has_latencies(log: RequestLog) -> bool:
    return any(r.ttft is not None or r.e2e is not None for r in log.requests)


def replay(args: argparse.Namespace) -> int:
    """Replay a log against a scenario (virtual time) or an endpoint (real time); report the drift."""
    if not args.scenario and not args.against:
        sys.stderr.write("aisim replay: give --scenario S (simulation), --against URL (a live endpoint), or both\n")
        return 2
    try:
        log = read_log(args.log, args.format, args.timestamp_unit).head(args.count)
    except (LogError, OSError) as error:
        sys.stderr.write(f"aisim replay: {error}\n")
        return 1
    checked = None
    if args.scenario:
        checked = _scenario(args.scenario, "replay")
        if checked.scenario is None:
            return 1
    try:
        if args.against:
            from .live import LiveReplay

            replayed = LiveReplay(args.against, args.speed, args.concurrency, args.model, args.api_key).run(log)
            late = replayed.meta.get("late", 0)
            if late:
                sys.stderr.write(f"aisim replay: {late} requests waited for one of the {args.concurrency} slots\n")
            reference, label = log, "live endpoint vs recorded log"
            if checked is not None:  # the simulation of the arrivals the endpoint actually got
                reference = SimulationReplay(checked.scenario, checked.base_dir, args.seed, args.speed, args.model,
                                             itl=True).run(replayed)
                label = "live endpoint vs simulation"
        else:
            assert checked is not None
            replayed = SimulationReplay(checked.scenario, checked.base_dir, args.seed, args.speed, args.model,
                                        itl=args.itl or _has_latencies(log)).run(log)
            reference, label = log, "simulation vs recorded log"
    except ReplayError as error:
        sys.stderr.write(f"aisim replay: {error}\n")
        return 1
    report = compare(reference, replayed, thresholds(args.threshold))
    return _emit(args, label, reference, replayed, report)


def _emit(args: argparse.Namespace, label: str, reference: RequestLog, replayed: RequestLog, report: DriftReport) -> int:
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            write_log(out, replayed)
    if args.plot:
        from .plot import write_plot

        write_plot(args.plot, reference, replayed, f"aisim replay {Path(args.log).name}: {label}")
    data = {"log": args.log, "comparison": label, "statuses": replayed.statuses(), **report.to_dict()}
    if args.report:
        Path(args.report).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    if args.json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        counts = ", ".join(f"{n} {s}" for s, n in replayed.statuses().items() if n)
        sys.stdout.write(f"{label}: {len(replayed)} requests replayed ({counts})\n" + drift_table(report))
    judged = any(m.passed is not None for m in report.metrics.values())
    return 0 if report.passed or not judged else 1


def calibrate(args: argparse.Namespace) -> int:
    """Fit the scenario's cost-model constants to a log, write the updated scenario, show the drift."""
    from .calibrate import CalibrationError, write_scenario
    from .calibrate import calibrate as fit_log

    require("calibrate", "aisim calibrate")
    checked = _scenario(args.scenario, "calibrate")
    if checked.scenario is None:
        return 1
    try:
        log = read_log(args.log, args.format, args.timestamp_unit).head(args.count)
        result = fit_log(log, checked.scenario, checked.base_dir, model=args.model, seed=args.seed, speed=args.speed,
                         max_evaluations=args.max_evaluations)
    except (LogError, OSError, ReplayError, CalibrationError) as error:
        sys.stderr.write(f"aisim calibrate: {error}\n")
        return 1
    source = Path(args.scenario)
    out = Path(args.output) if args.output else source.with_name(source.stem + ".calibrated.yaml")
    write_scenario(source, out, result.fits)
    for warning in result.warnings:
        sys.stderr.write(f"aisim calibrate: warning: {warning}\n")
    assert result.drift_before is not None and result.drift_after is not None
    models: dict[str, dict[str, Any]] = {name: {"before": vars(result.before[name]), "after": vars(found.efficiency), "loss": found.loss,
                     "evaluations": found.evaluations} for name, found in result.fits.items()}
    if args.json:
        data = {"scenario": str(out), "models": models, "drift_before": result.drift_before.to_dict(),
                "drift_after": result.drift_after.to_dict(), "warnings": result.warnings}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return 0
    for name, entry in models.items():
        before, after = entry["before"], entry["after"]
        sys.stdout.write(f"{name}: {entry['evaluations']} replays, loss {entry['loss']:.3g}\n")
        for key in ("bandwidth", "mfu", "step_overhead_ns", "per_request_ns"):
            sys.stdout.write(f"  {key:<17}{before[key]:>14.6g} -> {after[key]:<14.6g}\n")
    sys.stdout.write("before:\n" + drift_table(result.drift_before) + "after:\n" + drift_table(result.drift_after))
    sys.stdout.write(f"wrote {out}\n")
    return 0
