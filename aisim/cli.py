"""The `aisim` command."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from . import __version__
from .scenario import check_file, render_json, render_text, schema_text


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
