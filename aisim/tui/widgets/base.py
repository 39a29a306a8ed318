"""A view that draws the latest frame as rich text."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ..board import Frame

GIB = 1 << 30
MIB = 1 << 20


def runs(cells: list[tuple[str, str]]) -> Text:
    """(character, style) cells as text, one span per run of equal cells (a span per cell is slow)."""
    out = Text()
    i = 0
    while i < len(cells):
        j = i
        while j < len(cells) and cells[j] == cells[i]:
            j += 1
        out.append(cells[i][0] * (j - i), style=cells[i][1])
        i = j
    return out


def size_text(size: float) -> str:
    """Bytes as GiB or MiB, as PyTorch's messages write them."""
    return f"{size / GIB:.2f} GiB" if abs(size) >= GIB else f"{size / MIB:.1f} MiB"


class FrameView(Widget):
    """Holds the latest frame (an immutable snapshot) and redraws when it changes."""

    DEFAULT_CSS = """
    FrameView { height: auto; }
    """

    frame: reactive[Frame | None] = reactive(None, always_update=True, layout=True)
    """The frame drawn (None before the first one)."""

    def render(self) -> Text:
        if self.frame is None:
            return Text("waiting for the simulation...", style="dim")
        return self.draw(self.frame, max(self.size.width, 20))

    def draw(self, frame: Frame, width: int) -> Text:
        """The view of `frame` at `width` columns."""
        raise NotImplementedError
