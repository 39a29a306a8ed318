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
from ..scenario import Scenario, check_file, render_text
from .app import AisimTui
from .source import AttachSource, LocalSource, Source

Server = tuple[Simulation, RealTimeClock, Callable[[], Awaitable[str]]]
"""A server's simulation, its clock, and a coroutine function that starts serving and returns where."""
Serving = Callable[[Scenario, Path, argparse.Namespace], Server]
"""Builds a server for a scenario (the command line's `aisim.api` wiring)."""


def build_source(args: argparse.Namespace, serving: Serving | None = None) -> Source | None:
    """The source for the parsed arguments (None after reporting a problem on stderr)."""
    if args.attach:
        return AttachSource(args.attach, args.token)
    if not args.scenario:
        sys.stderr.write("aisim tui: give a SCENARIO or --attach URL\n")
        return None
    checked = check_file(args.scenario)
    sys.stderr.write(render_text(checked.problems))
    if checked.scenario is None:
        return None
    if args.serve:
        if serving is None:
            sys.stderr.write("aisim tui: --serve is not available here\n")
            return None
        return _served(serving(checked.scenario, checked.base_dir, args), checked.scenario.metadata.name, args.paused)
    from ..engine import EndlessWorkload

    sim = Simulation(checked.scenario, checked.base_dir, seed=args.seed, retain=False)
    try:
        stop = sim.stop_time()
    except EndlessWorkload as error:
        sys.stderr.write(f"aisim tui: {error}\n")
        return None
    sim.start_workload()  # what `Simulation.run` does before its clock starts
    return LocalSource(sim, speed=args.speed, paused=args.paused, stop_at=stop, drains=stop is None)


def _served(server: Server, name: str, paused: bool) -> Source:
    sim, clock, start = server
    sim.start_workload()  # the scenario's own traffic runs alongside the clients'

    async def startup() -> None:
        source.label = f"{name} at {await start()}"

    source = LocalSource(sim, clock=clock, paused=paused, startup=startup)
    return source


def run(args: argparse.Namespace, serving: Serving | None = None) -> int:
    """The `aisim tui` command (`serving`: how `--serve` builds its server)."""
    source = build_source(args, serving)
    if source is None:
        return 1
    AisimTui(source, fps=args.fps).run()
    error = getattr(source, "error", "")
    if error:
        sys.stderr.write(f"aisim tui: {error}\n")
    return 0
