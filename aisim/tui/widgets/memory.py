"""Memory per GPU: usage against the thresholds, the pool's map, fragmentation, size classes, OOMs."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from ..board import NS, Frame
from .base import FrameView, runs, size_text

CELL_STYLE = {"A": ("█", "magenta"), "C": ("▒", "yellow"), "O": ("▓", "blue"), ".": ("·", "bright_black")}
LEVEL_STYLE = {"normal": "green", "warning": "yellow", "critical": "bold red"}
MAP_ROWS = 4


def usage_bar(pool: dict[str, Any], width: int) -> Text:
    """Usage as a bar with the warning (`w`) and critical (`c`) thresholds marked on it."""
    filled = round(pool["usage"] * width)
    marks = {min(int(pool["warning"] * width), width - 1): "w", min(int(pool["critical"] * width), width - 1): "c"}
    style = LEVEL_STYLE.get(pool["level"], "")
    return runs([(marks[i], "bold white on grey23") if i in marks else
                 ("█", style) if i < filled else ("░", "bright_black") for i in range(width)])


def map_rows(cells: str, width: int, rows: int) -> list[Text]:
    """The map's cells resampled to `rows` lines of `width` characters (each the cell at its start)."""
    count = width * rows
    return [runs([CELL_STYLE[cells[(row * width + col) * len(cells) // count]] for col in range(width)])
            for row in range(rows)]


class MemoryView(FrameView):
    """The memory pool of every GPU."""

    def draw(self, frame: Frame, width: int) -> Text:
        out = Text()
        for gpu in frame.gpus:
            pool = frame.pools.get(gpu)
            if pool is None:
                continue
            level = pool["level"]
            out.append(f"{gpu}", style="bold")
            out.append(f"  {pool['allocator']} pool, {size_text(pool['capacity'])}  usage ")
            out.append(f"{pool['usage']:.1%} {level.upper()}", style=LEVEL_STYLE.get(level, ""))
            out.append(f"  (warn {pool['warning']:.0%}, crit {pool['critical']:.0%})\n")
            out.append_text(usage_bar(pool, width - 1))
            out.append("\n")
            out.append(f"allocated {size_text(pool['allocated'])}  cached {size_text(pool['cached'])}  "
                       f"outside {size_text(pool['outside'])}  free {size_text(pool['free'])}\n")
            out.append(f"fragmentation {pool['fragmentation']:.1%}  external {pool['external_fragmentation']:.1%}  "
                       f"inactive split {size_text(pool['inactive_split'])}  segments {pool['segments']}  "
                       f"blocks {pool['blocks']}\n")
            for line in map_rows(pool["map"], width - 1, MAP_ROWS):
                out.append_text(line)
                out.append("\n")
            for kind, label in (("A", "allocated"), ("C", "cached"), ("O", "outside the pool"), (".", "free")):
                char, style = CELL_STYLE[kind]
                out.append(char, style=style)
                out.append(f" {label}  ")
            out.append("\n")
            out.append("size classes ", style="bold")
            bins = pool["bins"][-6:]
            out.append("  ".join(f"{size_text(1 << log2)}+: {size_text(a)}/{size_text(c)}" for log2, a, c in bins)
                       or "(empty pool)")
            out.append("  (allocated/cached)\n" if bins else "\n")
            ooms = [o for o in frame.ooms if o[1] == gpu]
            out.append(f"OOM events: {len(ooms)}\n", style="bold red" if ooms else "")
            for time_ns, _, message in ooms[-3:]:
                out.append(f"  {time_ns / NS:.3f}s ", style="red")
                out.append(message + "\n")  # wrapped at the view's width, never cut
            crossings = [c for c in frame.crossings if c[1] == gpu][-3:]
            for time_ns, _, entered, usage in crossings:
                out.append(f"  {time_ns / NS:.3f}s entered {entered} at {usage:.1%}\n",
                           style=LEVEL_STYLE.get(entered, ""))
        return out
