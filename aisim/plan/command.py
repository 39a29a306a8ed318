"""`aisim plan`: validate, apply the flags that override the plan, run it, print and write the outputs."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..extras import require
from ..scenario import Scenario, check_file, render_text
from . import PlanError, plan_scenario, raw_document
from .charts import html_report, pareto_image
from .execute import Bar
from .output import csv_text, table, yaml_text

DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "aisim" / "plan"


def _overridden(document: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The document with the plan flags given on the command line written into its plan section."""
    plan = dict(document.get("plan") or {})
    for flag, key in (("survive", "survive"), ("goal", "goal"), ("target_rate", "targetRate")):
        if getattr(args, flag) is not None:
            plan[key] = getattr(args, flag)
    if args.requests is not None:
        plan["search"] = {**plan.get("search", {}), "requests": args.requests}
    return {**document, "plan": plan}


def plan_command(args: argparse.Namespace) -> int:
    """Run `aisim plan`; the exit status is 0 when a configuration meets the SLO (and the target rate)."""
    if args.out:  # before any work: the report is drawn after minutes of simulation
        require("plan", "aisim plan --out")
    if args.ray:
        require("ray", "aisim plan --ray")
    checked = check_file(args.scenario)
    sys.stderr.write(render_text(checked.problems))
    if checked.scenario is None:
        return 1
    document = _overridden(raw_document(args.scenario), args)
    try:
        scenario = Scenario.model_validate(document, context={"base_dir": checked.base_dir})
    except ValidationError as error:
        sys.stderr.write(f"aisim plan: {error}\n")
        return 2
    if scenario.plan is None:
        sys.stderr.write(f"aisim plan: {args.scenario} has no plan: section\n")
        return 2
    cache = None if args.no_cache else str(Path(args.cache) if args.cache else DEFAULT_CACHE)
    bar = None if args.quiet or not sys.stderr.isatty() else Bar(lambda r: r["goodput"]["requests_per_s_per_gpu"]
                                                                    if "goodput" in r else r["max_rate"] / r["gpus"])
    try:
        result = plan_scenario(document, scenario, checked.base_dir, args.jobs, args.ray, cache, bar,
                               prune=not getattr(args, "all", False))
    except (PlanError, RuntimeError) as error:
        sys.stderr.write(f"aisim plan: {error}\n")
        return 1
    # the answer first, then the files (a file that cannot be written leaves the answer printed)
    sys.stdout.write(json.dumps(result, indent=2) + "\n" if args.json else table(result))
    sys.stdout.flush()
    if args.out:
        write_outputs(Path(args.out), result)
    return 0 if result["answer"]["winner"] else 1


def write_outputs(out: Path, result: dict[str, Any]) -> None:
    """Every output file of a plan into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "plan.csv").write_text(csv_text(result), encoding="utf-8")
    (out / "report.html").write_text(html_report(result), encoding="utf-8")
    if any(r["status"] == "meets" for r in result["configurations"]):
        pareto_image(result, out / "pareto.svg")
        pareto_image(result, out / "pareto.png")
    if result.get("winner_scenario"):
        header = (f"{result['winner_scenario']['metadata']['description']}.\n"
                  f"Written by aisim plan: `aisim run` reproduces the run that set the rate; `aisim serve` and\n"
                  f"`aisim tui` show the deployment. The same replica in vLLM:\n  {result['vllm_serve']}")
        (out / "winner.yaml").write_text(yaml_text(result["winner_scenario"], header), encoding="utf-8")
        (out / "vllm-serve.txt").write_text(result["vllm_serve"] + "\n", encoding="utf-8")
