"""The `aisim` command."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

from . import __version__
from .scenario import check_file, render_json, render_text, schema_text

DEFAULT_SCENARIO = Path(__file__).resolve().parent / "scenarios" / "default.yaml"


def _validate(args: argparse.Namespace) -> int:
    results = [check_file(path) for path in args.files]
    if args.format == "json":
        sys.stdout.write(render_json({r.file: r.problems for r in results}))
    else:
        for result in results:
            sys.stdout.write(render_text(result.problems))
            errors = sum(p.severity == "error" for p in result.problems)
            warnings = len(result.problems) - errors
            verdict = "valid" if result.valid else f"invalid ({errors} error{'s' * (errors != 1)})"
            extra = f", {warnings} warning{'s' * (warnings != 1)}" if warnings else ""
            sys.stdout.write(f"{result.file}: {verdict}{extra}\n")
    return 0 if all(r.valid for r in results) else 1


def _run(args: argparse.Namespace) -> int:
    from .engine.report import build_report
    from .engine.simulation import EndlessWorkload, Simulation
    from .engine.workload import TraceError
    from .render import Progress, report_table
    from .scenario.units import QuantityError, parse_duration

    checked = check_file(args.scenario)
    sys.stderr.write(render_text(checked.problems))
    if checked.scenario is None:
        return 1
    try:
        until = parse_duration(args.until) if args.until else None
    except QuantityError as error:
        sys.stderr.write(f"aisim run: --until: {error}\n")
        return 2
    sim = Simulation(checked.scenario, checked.base_dir, seed=args.seed)
    try:
        stop = sim.stop_time(until)
    except EndlessWorkload as error:
        sys.stderr.write(f"aisim run: {error}\n")
        return 1
    progress = Progress(stop) if sys.stderr.isatty() and not args.quiet else None
    started = time.perf_counter()
    try:
        sim.run(until, progress.update if progress else None)
    except TraceError as error:
        sys.stderr.write(f"aisim run: trace: {error}\n")
        return 1
    wall = time.perf_counter() - started
    if progress:
        progress.close()
    if args.timeline:
        with open(args.timeline, "w", encoding="utf-8") as out:
            sim.timeline.write_jsonl(out)
    if args.chrome_trace:
        with open(args.chrome_trace, "w", encoding="utf-8") as out:
            sim.timeline.write_chrome_trace(out)
    report = build_report(sim, wall if args.timing else None)
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2, sort_keys=False) + "\n")
    else:
        sys.stdout.write(report_table(report, wall))
    return 0


def _schema(args: argparse.Namespace) -> int:
    sys.stdout.write(schema_text())
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="aisim", description="AI inference service simulator.")
    parser.add_argument("--version", action="version", version=f"aisim {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    validate = commands.add_parser("validate", help="check scenario files and report every problem")
    validate.add_argument("files", nargs="+", metavar="FILE", help="scenario files (YAML or JSON)")
    validate.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    validate.set_defaults(handler=_validate)

    run = commands.add_parser("run", help="run a scenario headless on the virtual clock and report")
    run.add_argument("scenario", nargs="?", default=str(DEFAULT_SCENARIO), metavar="SCENARIO",
                     help="scenario file (default: the built-in default scenario)")
    run.add_argument("--json", action="store_true", help="print the report as JSON")
    run.add_argument("--timeline", metavar="FILE", help="write the timeline as JSON lines")
    run.add_argument("--chrome-trace", metavar="FILE", help="write a Chrome trace (opens in Perfetto)")
    run.add_argument("--seed", type=int, help="override the scenario's seed")
    run.add_argument("--until", metavar="DURATION", help="stop at this simulated time, like 10m")
    run.add_argument("--timing", action="store_true", help="add wall seconds and speed to the JSON report")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(handler=_run)

    schema = commands.add_parser("schema", help="print the JSON Schema of the scenario language")
    schema.set_defaults(handler=_schema)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    return int(args.handler(args))
