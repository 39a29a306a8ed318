"""Speed and memory of a headless run: the whole Azure conversation trace on Llama-3-8B and one H100.

Targets (issue 3): >= 500x real time on one core and peak RSS under 500 MB. Each variant runs in a
fresh process (so its peak RSS is its own) and prints simulated seconds per wall second. The
baseline, measured in the same run, is the same simulation planned one step at a time
(`macro_steps=False`); the ratio says what planning runs of decode steps at once buys.

    python bench/run_speed.py [SCENARIO] [--skip-baseline]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(scenario: str, macro: bool) -> dict[str, float]:
    """Run one variant in this process and return its figures."""
    from aisim.engine.simulation import Simulation
    from aisim.scenario import load_scenario

    loaded = load_scenario(scenario)
    started = time.perf_counter()
    sim = Simulation(loaded, Path(scenario).parent, macro_steps=macro)
    sim.run()
    wall = time.perf_counter() - started
    simulated = sim.kernel.now / 1e9
    return {
        "requests": len(sim.requests),
        "simulated_s": simulated,
        "wall_s": wall,
        "speed": simulated / wall,
        "events": sim.kernel.processed,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def in_subprocess(scenario: str, macro: bool) -> dict[str, float]:
    code = f"import sys, json; sys.path.insert(0, {str(ROOT / 'bench')!r}); import run_speed; " \
           f"print(json.dumps(run_speed.measure({scenario!r}, {macro!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default=str(ROOT / "scenarios" / "azure-conv.yaml"))
    parser.add_argument("--skip-baseline", action="store_true", help="do not run the step-at-a-time baseline")
    args = parser.parse_args()
    fast = in_subprocess(args.scenario, True)
    print(f"scenario  {args.scenario}: {fast['requests']:,.0f} requests, {fast['simulated_s']:,.1f} simulated s")
    print(f"aisim     {fast['wall_s']:.2f} wall s, {fast['speed']:,.0f}x real time, {fast['events']:,.0f} events, "
          f"peak RSS {fast['peak_rss_mb']:.0f} MB")
    if not args.skip_baseline:
        slow = in_subprocess(args.scenario, False)
        print(f"baseline  one step at a time: {slow['wall_s']:.2f} wall s, {slow['speed']:,.0f}x real time, "
              f"{slow['events']:,.0f} events, peak RSS {slow['peak_rss_mb']:.0f} MB")
        print(f"ratio     decode runs / step at a time: {fast['speed'] / slow['speed']:.2f}x faster")
    print(f"target    >= 500x real time: {'PASS' if fast['speed'] >= 500 else 'FAIL'}; "
          f"peak RSS < 500 MB: {'PASS' if fast['peak_rss_mb'] < 500 else 'FAIL'}")


if __name__ == "__main__":
    main()
