"""Frames per second and simulation pace of `aisim tui` at 100x on the Azure conversation trace.

Targets (issue 9): the TUI keeps at least 20 frames per second and the simulation keeps pace at
100x on `scenarios/azure-conv.yaml`. The app runs headless (Textual's headless driver: everything is
composed and rendered, nothing is written to a terminal) for `--seconds` wall seconds, with the
simulation on the real-time clock in the same event loop, as `aisim tui` runs it. Printed, all
measured in this run:

- frames/s: frames the views drew, over the wall time;
- pace: virtual time the engine actually reached (the last event it ran, `kernel.now`) over
  wall time x speed (1.0 = it kept up; the clock's own `virtual_now` is wall time x speed by
  definition, so it cannot be the measure);
- overdue: at each frame, how far the clock's virtual time had passed the next pending event (an
  event due but not run yet), as virtual and wall milliseconds, mean / p99 / max.

    python bench/tui_speed.py [SCENARIO] [--speed 100] [--seconds 10] [--fps 30] [--size 120x40] [--view streams]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


async def measure(scenario: Path, speed: float, seconds: float, fps: float, size: tuple[int, int],
                  view: str) -> dict[str, float]:
    from aisim.engine.simulation import Simulation
    from aisim.scenario import load_scenario
    from aisim.tui.app import AisimTui
    from aisim.tui.source import LocalSource

    sim = Simulation(load_scenario(scenario), scenario.parent, retain=False)
    sim.start_workload()  # as `aisim tui` does
    source = LocalSource(sim, speed=speed)
    app = AisimTui(source, fps=fps, view=view)
    overdue: list[int] = []
    start_events = 0
    box: dict[str, float] = {}

    async def watch() -> None:
        nonlocal start_events
        while not app.is_running:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # start-up (the first layout) is not what is measured
        clock = source.clock
        start_wall, start_virtual, start_frames = time.monotonic(), sim.kernel.now, app.frames
        start_events = sim.kernel.processed
        while time.monotonic() - start_wall < seconds:
            await asyncio.sleep(1 / fps)
            pending = sim.kernel.peek()
            if pending is not None:
                overdue.append(max(clock.virtual_now() - pending, 0))
        wall = time.monotonic() - start_wall
        box.update(wall=wall, virtual=(sim.kernel.now - start_virtual) / 1e9, frames=app.frames - start_frames,
                   events=sim.kernel.processed - start_events)
        app.exit()

    watcher = asyncio.get_running_loop().create_task(watch())
    await app.run_async(headless=True, size=size)
    await watcher
    late = np.array(overdue or [0], dtype=np.float64) / 1e6
    return {
        "wall_s": box["wall"], "frames_per_s": box["frames"] / box["wall"],
        "virtual_s": box["virtual"], "pace": box["virtual"] / (box["wall"] * speed),
        "events_per_s": box["events"] / box["wall"],
        "overdue_virtual_ms_mean": float(late.mean()), "overdue_virtual_ms_p99": float(np.percentile(late, 99)),
        "overdue_virtual_ms_max": float(late.max()), "overdue_wall_ms_max": float(late.max() / speed),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default=str(ROOT / "scenarios" / "azure-conv.yaml"))
    parser.add_argument("--speed", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--fps", type=float, default=30.0, help="frames the app asks for")
    parser.add_argument("--size", default="120x40", help="terminal size, COLSxROWS")
    parser.add_argument("--view", default="streams", choices=("memory", "streams", "states", "requests", "log"))
    args = parser.parse_args()
    cols, rows = (int(v) for v in args.size.split("x"))
    figures = asyncio.run(measure(Path(args.scenario), args.speed, args.seconds, args.fps, (cols, rows), args.view))
    print(f"scenario {Path(args.scenario).name} at x{args.speed:g}, {cols}x{rows}, asking {args.fps:g} fps, "
          f"{args.view} view, {figures['wall_s']:.1f} wall s")
    print(f"  frames/s            {figures['frames_per_s']:8.1f}   (target >= 20)")
    print(f"  pace                {figures['pace']:8.3f}   (virtual s reached / (wall s x speed); target ~1.0)")
    print(f"  virtual s advanced  {figures['virtual_s']:8.1f}")
    print(f"  engine events/s     {figures['events_per_s']:8.0f}")
    print(f"  overdue (virtual ms) mean {figures['overdue_virtual_ms_mean']:.1f}  p99 {figures['overdue_virtual_ms_p99']:.1f}  "
          f"max {figures['overdue_virtual_ms_max']:.1f}  (max {figures['overdue_wall_ms_max']:.2f} wall ms)")


if __name__ == "__main__":
    main()
