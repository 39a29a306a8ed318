"""State machines per model version: the diagram with the current state highlighted, recent transitions."""

from __future__ import annotations

from rich.text import Text

from ...engine import EDGES, State
from ..board import NS, Frame, Machine
from .base import FrameView

DIAGRAM = (
    "{INIT} ──▶ {LOADING} ──▶ {READY} ◀──▶ {DEGRADED}",
    "          ▲  │        │   ╲     ╱     │",
    "          │  │        │  {UNLOADING}    │",
    "          │  ▼        │      │        │",
    "       {UNAVAILABLE} ◀──┴──────┴────────┘",
)
"""The lifecycle's states laid out by hand; `EDGES` below the diagram lists every move exactly."""
STATE_STYLE = {"READY": "bold black on green", "DEGRADED": "bold black on yellow", "UNAVAILABLE": "bold white on red",
               "LOADING": "bold black on cyan", "UNLOADING": "bold black on magenta", "INIT": "bold black on white"}


def diagram(current: str) -> Text:
    """The diagram with `current` highlighted (the others dim)."""
    out = Text()
    for line in DIAGRAM:
        rest = line
        while "{" in rest:
            before, _, after = rest.partition("{")
            name, _, rest = after.partition("}")
            out.append(before, style="bright_black")
            out.append(name, style=STATE_STYLE.get(name, "reverse") if name == current else "")
        out.append(rest + "\n", style="bright_black")
    return out


def edges_line(current: str) -> str:
    """Where the current state may go next, from the lifecycle's own edges."""
    try:
        nexts = sorted(EDGES[State(current)])
    except ValueError:
        return ""
    return f"from {current}: " + ", ".join(nexts)


class StatesView(FrameView):
    """Every model version's state machine."""

    def draw(self, frame: Frame, width: int) -> Text:
        out = Text()
        for machine in frame.machines:
            self._machine(out, machine, frame.now_ns)
        return out

    @staticmethod
    def _machine(out: Text, machine: Machine, now: int) -> None:
        out.append(f"{machine.model} version {machine.version}", style="bold")
        out.append("  (active version)" if machine.active else "", style="green")
        since = machine.transitions[-1].time_ns if machine.transitions else 0
        out.append(f"  {machine.state} for {(now - since) / NS:.1f} s\n")
        out.append_text(diagram(machine.state))
        out.append(edges_line(machine.state) + "\n", style="dim")
        for transition in machine.transitions[-4:]:
            out.append(f"  {transition.time_ns / NS:9.3f}s  -> {transition.state:<11}", style=STATE_STYLE.get(transition.state, ""))
            out.append(f" {transition.reason}\n")
        out.append("\n")
