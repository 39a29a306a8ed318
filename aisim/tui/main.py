"""`aisim tui`: build the source the command line asks for and run the app.

`--serve` needs the API layer, which the TUI may not import (`docs/architecture.md`): the command line passes a
`Serving` that builds the server for a scenario. The server's own simulation (built step by step, as
serving needs) is what the TUI then shows, and its clock is the one that pause, speed and faults steer.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from ..engine import RealTimeClock, Simulation
from ..scenario import DEFAULT_SCENARIO, Scenario, check_file, render_text
from .app import AisimTui
from .source import AttachSource, LocalSource, Source

Server = tuple[Simulation, RealTimeClock, Callable[[], Awaitable[str]]]
"""A server's simulation, its clock, and a coroutine function that starts serving and returns where."""
Serving = Callable[[Scenario, Path, argparse.Namespace], Server]
"""Builds a server for a scenario (the command line's `aisim.api` wiring)."""


WATCH_SPEED = 10.0
"""Virtual seconds per wall second of `aisim tui` watching a run; serving (`--serve`) runs at 1, as `aisim serve`."""


def local_simulation(scenario: Scenario, base_dir: Path, seed: int | None = None) -> Simulation:
    """The simulation `aisim tui` watches: bounded as a server's, and stepped one engine step at a time (no macro
    steps), so that the streams and the requests in flight are current at every frame."""
    return Simulation(scenario, base_dir, seed=seed, macro_steps=False, retain=False)


def build_source(args: argparse.Namespace, serving: Serving | None = None) -> Source | None:
    """The source for the parsed arguments (None after reporting a problem on stderr); without a scenario, the
    built-in default, as `aisim run` and `aisim serve`."""
    if args.attach:
        return AttachSource(args.attach, args.token)
    checked = check_file(args.scenario or str(DEFAULT_SCENARIO))
    sys.stderr.write(render_text(checked.problems))
    if checked.scenario is None:
        return None
    if args.serve:
        if serving is None:
            sys.stderr.write("aisim tui: --serve is not available here\n")
            return None
        args.speed = 1.0 if args.speed is None else args.speed
        return _served(serving(checked.scenario, checked.base_dir, args), checked.scenario.metadata.name, args)
    from ..engine import EndlessWorkload

    sim = local_simulation(checked.scenario, checked.base_dir, args.seed)
    try:
        stop = sim.stop_time()
    except EndlessWorkload as error:
        sys.stderr.write(f"aisim tui: {error}\n")
        return None
    sim.start_workload()  # what `Simulation.run` does before its clock starts
    return LocalSource(sim, speed=WATCH_SPEED if args.speed is None else args.speed, paused=args.paused,
                       stop_at=stop, drains=stop is None)


def _served(server: Server, name: str, args: argparse.Namespace) -> Source:
    """Serving as `aisim serve` does (its pace unless `--speed`); `--workload` adds the scenario's own traffic
    beside the clients'. The status line says both."""
    sim, clock, start = server
    if args.workload:
        sim.start_workload()
    traffic = "the scenario's workload as background traffic" if args.workload else "no background traffic"

    async def startup() -> None:
        source.label = f"{name} at {await start()} (pace x{clock.speed:g}, {traffic})"

    source = LocalSource(sim, clock=clock, paused=args.paused, startup=startup)
    return source


def run(args: argparse.Namespace, serving: Serving | None = None) -> int:
    """The `aisim tui` command (`serving`: how `--serve` builds its server)."""
    source = build_source(args, serving)
    if source is None:
        return 1
    AisimTui(source, fps=args.fps, screenshots=Path(args.screenshot_dir or ".")).run()
    error = getattr(source, "error", "")
    if error:
        sys.stderr.write(f"aisim tui: {error}\n")
    return 0
