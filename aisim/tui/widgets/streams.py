"""Streams per GPU: one lane per stream with its recent kernels, queue depths, the requests each engine on the
GPU runs and queues, recent preemptions.

The TUI steps its simulation one engine step at a time (`aisim.tui.main.local_simulation`), so a lane shows
every step as it ends; a server's simulation (`--serve`, `--attach`) does the same."""

from __future__ import annotations

from rich.text import Text

from ..board import NS, Frame, Lane
from .base import FrameView, runs

STYLES = ("cyan", "green", "magenta", "yellow", "blue", "red")
LABEL = 22


def lane_bar(lane: Lane, start: int, end: int, width: int, colours: dict[str, str]) -> Text:
    """The lane's kernels between `start` and `end` (virtual ns) on `width` columns; idle time is `·`."""
    cells: list[tuple[str, int] | None] = [None] * width
    span = max(end - start, 1)
    for index, kernel in enumerate(lane.kernels):
        first = (kernel.start_ns - start) * width // span
        last = (kernel.end_ns - start) * width // span
        for i in range(max(first, 0), min(last, width - 1) + 1):
            cells[i] = (kernel.replica, index % 2)
    # consecutive kernels alternate between full and shaded blocks
    return runs([("·", "bright_black") if cell is None else ("█" if cell[1] == 0 else "▓", colours[cell[0]])
                 for cell in cells])


class StreamsView(FrameView):
    """The stream lanes of every GPU over the last `window_ns` of virtual time."""

    window_ns = 2 * NS

    def draw(self, frame: Frame, width: int) -> Text:
        out = Text()
        end = frame.now_ns
        start = end - self.window_ns
        colours: dict[str, str] = {}
        for lane in frame.lanes:
            for kernel in lane.kernels:
                colours.setdefault(kernel.replica, STYLES[len(colours) % len(STYLES)])
        bar_width = max(width - LABEL - 1, 10)
        out.append(f"last {self.window_ns / NS:.0f} s of virtual time, up to {end / NS:.3f}s\n", style="dim")
        for gpu in frame.gpus:
            out.append(f"{gpu}\n", style="bold")
            for lane in (lane for lane in frame.lanes if lane.gpu == gpu):
                label = f" {lane.stream[:10]:<10} q{lane.waiting:<2}r{lane.running:<2}"
                out.append(f"{label:<{LABEL}}")
                out.append_text(lane_bar(lane, start, end, bar_width, colours))
                out.append("\n")
                if lane.kernels:
                    last = lane.kernels[-1]
                    out.append(f"{'':<{LABEL}}last: {last.name} ({last.replica}) "
                               f"{(last.end_ns - last.start_ns) / 1e6:.2f} ms at {last.start_ns / NS:.3f}s\n", style="dim")
            for load in (load for load in frame.loads if gpu in load.gpus):
                out.append(f" {load.replica}: ", style=colours.get(load.replica, ""))
                out.append(f"{load.running} request{'s' * (load.running != 1)} running, {load.waiting} waiting\n")
        if colours:
            for replica, style in colours.items():
                out.append("█", style=style)
                out.append(f" {replica}  ")
            out.append("\n")
        out.append(f"preemptions: {len(frame.preemptions)} recent\n", style="bold")
        for time_ns, gpu, lower, higher in frame.preemptions[-5:]:
            out.append(f"  {time_ns / NS:.4f}s {gpu}: {higher} preempts {lower}\n")
        return out
