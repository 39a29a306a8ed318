"""Speed of per-layer kernel detail: a one-minute two-model scenario with every layer's kernel simulated.

Target (issue 6): >= 10x real time at `simulation.detail: layer`. The scenario is
`scenarios/priorities.yaml` (a chat model and an embedding flood sharing one H100 on prioritised
streams: every step of both models goes through the stream scheduler). The baseline, measured in the
same run, is the same scenario at one kernel per step; the ratio says what per-layer detail costs.
Each variant runs in its own process so that neither warms the other's caches.

    python bench/layer_detail.py [SCENARIO]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 10.0


def measure(path: str, detail: str) -> dict[str, float]:
    """Run the scenario at one detail level in this process."""
    from aisim.engine.simulation import Simulation
    from aisim.scenario import load_scenario

    scenario = load_scenario(path)
    scenario = scenario.model_copy(update={"simulation": scenario.simulation.model_copy(update={"detail": detail})})
    started = time.perf_counter()
    sim = Simulation(scenario, Path(path).parent)
    sim.run()
    wall = time.perf_counter() - started
    kernels = sum(1 for r in sim.timeline.events if r[1] == "kernel")
    return {"wall": wall, "simulated": sim.kernel.now / 1e9, "events": sim.kernel.processed, "kernels": kernels}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", nargs="?", default=str(ROOT / "scenarios" / "priorities.yaml"))
    parser.add_argument("--detail", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.detail:
        print(json.dumps(measure(args.scenario, args.detail)))
        return 0
    results = {}
    for detail in ("step", "layer"):
        out = subprocess.run([sys.executable, __file__, args.scenario, "--detail", detail],
                             capture_output=True, text=True, check=True)
        results[detail] = json.loads(out.stdout)
    for detail, r in results.items():
        speed = r["simulated"] / r["wall"]
        print(f"{detail:6} {r['wall']:6.2f} wall s for {r['simulated']:.1f} simulated s: {speed:6.1f}x real time, "
              f"{r['events']:,.0f} events, {r['kernels']:,.0f} kernels")
    layer, step = results["layer"], results["step"]
    speed = layer["simulated"] / layer["wall"]
    print(f"ratio  per-layer / per-step wall time: {layer['wall'] / step['wall']:.2f}x")
    print(f"target >= {TARGET:.0f}x real time at per-layer detail: {'PASS' if speed >= TARGET else 'FAIL'} ({speed:.1f}x)")
    return 0 if speed >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
