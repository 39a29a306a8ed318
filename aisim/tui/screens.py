"""Modal screens: help, and the fault catalogue to inject from."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static

HELP = """\
[b]aisim tui[/b]: the scenario's simulation, live

[b]space[/b]  pause / resume       [b]n[/b]  one step (0.1 s virtual, pauses)
[b]+ -[/b]    speed up / down      [b]f[/b]  inject a fault from the catalogue
[b]1-5[/b]    memory, streams, states, requests, log views
[b]s[/b]      screenshot (SVG, to the working directory or --screenshot-dir)
[b]tab[/b]    next widget          [b]?[/b]  this help         [b]q[/b]  quit

memory map: [magenta]█[/] allocated  [yellow]▒[/] cached  [blue]▓[/] outside the pool  · free
usage bar: w = warning threshold, c = critical threshold
streams: a lane per stream, q = kernels queued, r = running;
engine steps stand for kernels when those are not simulated;
under each GPU, the requests each engine runs and queues.
Attached (--attach), the TUI only watches: the server keeps
its own clock and faults.

press escape or ? to close"""


class HelpScreen(ModalScreen[None]):
    """Key bindings and what the views show."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Static { width: auto; max-width: 90%; height: auto; padding: 1 2; border: round $accent;
                          background: $surface; }
    """
    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [
        Binding("escape,question_mark,q", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        yield Static(HELP, id="help")


class FaultScreen(ModalScreen[str | None]):
    """Pick one of the scenario's engine-level faults; dismisses with its name (None: cancelled)."""

    DEFAULT_CSS = """
    FaultScreen { align: center middle; }
    FaultScreen > Vertical { width: 60; height: auto; max-height: 80%; border: round $warning; background: $surface;
                             padding: 0 1; }
    FaultScreen OptionList { height: auto; max-height: 16; }
    """
    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [
        Binding("escape", "dismiss_none", "cancel")]

    def __init__(self, faults: list[str]) -> None:
        super().__init__()
        self.faults = faults

    def compose(self) -> ComposeResult:
        with Vertical():
            if self.faults:
                yield Static("Inject a fault now (enter), escape to cancel:")
                yield OptionList(*self.faults, id="faults")
            else:
                yield Static("This scenario has no engine-level faults (escape to close).")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.faults[event.option_index])

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
