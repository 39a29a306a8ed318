"""Speed of capacity planning: the documented example plan, and the headless engine per simulated request.

Runs `scenarios/plan-llama3-8b.yaml` (144 configurations) from an empty cache on every core, then a
second time from the filled cache (which must simulate nothing), and the Azure conversation trace
headless in a fresh process. Prints wall and CPU seconds (the machine may be shared: CPU seconds say
what the work cost), configurations per second, simulated requests per second per core, and the headless
microseconds per simulated request (wall and CPU) on azure-conv. Simulations and simulated requests
(every evaluated rate's and each saturated run's) do not depend on the machine's load; wall seconds do.

`--against REF` (default `main`) first plans the same example with the planner of that commit, checked out
in a temporary `git worktree` and run in its own process, and prints before and after side by side: wall
and CPU seconds, simulations, simulated requests and the winner with its capacity (the planner before
steady state reported one rate; after, the interval it carries).

    python bench/plan.py [--jobs N] [--skip-plan] [--out DIR] [--docs] [--against REF | --no-before]

`--docs` also rewrites what docs/plan.md shows of this run: `docs/plan-llama3-8b-pareto.svg` and the
console block under `$ aisim plan scenarios/plan-llama3-8b.yaml` (the terminal table,
the answer and the winner's `vllm serve` line, as `aisim plan` prints them). Rerun it
whenever the engine or the cost model changes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this tree's aisim, not whichever the environment installed
EXAMPLE = ROOT / "scenarios" / "plan-llama3-8b.yaml"
AZURE = ROOT / "scenarios" / "azure-conv.yaml"
PAGE = ROOT / "docs" / "plan.md"
PARETO = ROOT / "docs" / "plan-llama3-8b-pareto.svg"
COMMAND = "$ aisim plan scenarios/plan-llama3-8b.yaml"


def write_docs(result: dict[str, Any]) -> None:
    """docs/plan.md's Pareto plot and console block from this run's result."""
    from aisim.plan.charts import pareto_image
    from aisim.plan.output import table

    pareto_image(result, PARETO)
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(COMMAND + "\n") + len(COMMAND) + 1
    end = text.index("```\n", start)
    PAGE.write_text(text[:start] + table(result) + text[end:], encoding="utf-8")
    print(f"docs      wrote {PARETO.relative_to(ROOT)} and docs/plan.md's console block")


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the pool's workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def headless(scenario: Path) -> dict[str, float]:
    """One headless run in a fresh process: requests, wall and CPU seconds of the simulation alone."""
    code = ("import json, sys, time; from pathlib import Path; from aisim.scenario import load_scenario; "
            "from aisim.engine.simulation import Simulation; s = load_scenario(sys.argv[1]); "
            "sim = Simulation(s, Path(sys.argv[1]).parent); w, c = time.perf_counter(), time.process_time(); sim.run(); "
            "print(json.dumps({'requests': len(sim.requests), 'wall': time.perf_counter() - w, "
            "'cpu': time.process_time() - c}))")
    out = subprocess.run([sys.executable, "-c", code, str(scenario)], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def simulated_requests(result: dict[str, Any]) -> int:
    """Requests simulated by the plan's evaluations (every point of every curve and each saturated run, when
    nothing was cached)."""
    rows = result["configurations"]
    return sum(point["requests"] for row in rows for point in row.get("curve", []) if "requests" in point) + \
        sum((row.get("saturation") or {}).get("requests", 0) for row in rows)


BEFORE = """
import json, resource, sys, tempfile, time
from aisim.plan import plan_file
with tempfile.TemporaryDirectory() as cache:
    wall = time.perf_counter()
    result = plan_file(sys.argv[1], jobs=int(sys.argv[2]), cache_dir=cache)
    wall = time.perf_counter() - wall
own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
rows = {r["key"]: r for r in result["configurations"]}
winner = rows.get(result["answer"]["winner"]) or {}
print(json.dumps({"wall": wall, "cpu": cpu, "simulations": result["execution"]["simulations"],
                  "requests": sum(p["requests"] for r in result["configurations"] for p in r.get("curve", [])
                                  if "requests" in p),
                  "winner": winner.get("key"), "rate": winner.get("max_rate"),
                  "optimistic": (winner.get("capacity") or {}).get("optimistic")}))
"""


def before(ref: str, jobs: int) -> dict[str, Any]:
    """The example planned by the planner of commit `ref` (a temporary worktree, its own process)."""
    with tempfile.TemporaryDirectory() as folder:
        tree = Path(folder) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), ref], cwd=ROOT, check=True, capture_output=True)
        try:
            out = subprocess.run([sys.executable, "-c", BEFORE, str(tree / "scenarios" / EXAMPLE.name), str(jobs)],
                                 capture_output=True, text=True, check=True, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)})
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False, capture_output=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _capacity(rate: object, optimistic: object) -> str:
    if rate is None:
        return "none"
    return f"{rate:.3g}-{optimistic:.3g}/s" if optimistic else f"{rate:.3g}/s (one rate)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="processes (default: every core)")
    parser.add_argument("--skip-plan", action="store_true", help="only the headless azure-conv figure")
    parser.add_argument("--out", help="also write the plan's outputs (report, Pareto plot, winner) here")
    parser.add_argument("--docs", action="store_true", help="also rewrite docs/plan.md's example output and Pareto plot")
    parser.add_argument("--against", default="main", help="the commit whose planner is 'before' (default: main)")
    parser.add_argument("--no-before", action="store_true", help="skip the 'before' plan")
    args = parser.parse_args()
    from aisim.plan import plan_file
    from aisim.plan.command import write_outputs

    if not args.skip_plan:
        old = None if args.no_before else before(args.against, args.jobs)
        with tempfile.TemporaryDirectory() as cache:
            wall, cpu = time.perf_counter(), _cpu()
            result = plan_file(EXAMPLE, jobs=args.jobs, cache_dir=cache)
            wall, cpu = time.perf_counter() - wall, _cpu() - cpu
            again = time.perf_counter()
            second = plan_file(EXAMPLE, jobs=args.jobs, cache_dir=cache)
            again = time.perf_counter() - again
        execution = result["execution"]
        requests = simulated_requests(result)
        print(f"plan      {EXAMPLE.name}: {execution['configurations']} configurations "
              f"({execution['infeasible']} infeasible, {execution.get('pruned', 0)} pruned), {execution['simulations']} simulations, "
              f"{requests:,} simulated requests, {args.jobs} process(es)")
        print(f"          {wall:.1f} wall s, {cpu:.1f} CPU s: {execution['configurations'] / wall:.2f} configurations/s, "
              f"{requests / cpu:,.0f} simulated requests/s per core ({cpu / requests * 1e6:.0f} CPU us per request)")
        print(f"          second run from the cache: {again:.2f} wall s, {second['execution']['simulations']} simulations")
        print(f"          answer: {result['answer']['text']}")
        print(f"target    the whole plan in under 2 minutes: {'PASS' if wall < 120 else 'FAIL'} "
              f"({wall:.1f} wall s on {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the end)")
        rows = {r["key"]: r for r in result["configurations"]}
        winner = rows.get(result["answer"]["winner"]) or {}
        if old is not None:
            print(f"before    {args.against}: {old['wall']:.1f} wall s, {old['cpu']:.1f} CPU s, {old['simulations']} simulations, "
                  f"{old['requests']:,} simulated requests; winner {old['winner']} at {_capacity(old['rate'], old['optimistic'])}")
            print(f"after     this tree: {wall:.1f} wall s, {cpu:.1f} CPU s, {execution['simulations']} simulations, "
                  f"{requests:,} simulated requests; winner {winner.get('key')} at "
                  f"{_capacity(winner.get('max_rate'), (winner.get('capacity') or {}).get('optimistic'))}")
            print(f"ratio     after/before: {wall / old['wall']:.2f}x wall, {cpu / old['cpu']:.2f}x CPU, "
                  f"{requests / max(old['requests'], 1):.2f}x simulated requests")
        if args.out:
            write_outputs(Path(args.out), result)
        if args.docs:
            write_docs(result)
    run = headless(AZURE)
    print(f"headless  {AZURE.name}: {run['requests']:,} requests in {run['wall']:.2f} wall s, {run['cpu']:.2f} CPU s: "
          f"{run['wall'] / run['requests'] * 1e6:.0f} wall us, {run['cpu'] / run['requests'] * 1e6:.0f} CPU us per request")


if __name__ == "__main__":
    main()
