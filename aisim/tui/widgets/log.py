"""The event log: faults, memory thresholds, OOMs, model states and engine logs, newest last."""

from __future__ import annotations

from rich.text import Text

from ..board import Frame
from .base import FrameView

STYLES = (("OOM", "bold red"), ("ERROR", "red"), ("fault", "yellow"), ("critical", "red"), ("warning", "yellow"))


class LogView(FrameView):
    """The last lines of the board's log (as many as fit, the view scrolls)."""

    def draw(self, frame: Frame, width: int) -> Text:
        out = Text()
        for line in frame.log:
            style = next((s for word, s in STYLES if word in line), "")
            out.append(line + "\n", style=style)  # wrapped at the view's width, never cut
        return out or Text("no events yet", style="dim")
