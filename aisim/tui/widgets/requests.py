"""Requests: rates, TTFT and ITL sparklines (one value per virtual second), errors, KV-cache usage."""

from __future__ import annotations

from rich.text import Text

from ..board import NS, Frame
from .base import FrameView

BLOCKS = " ▁▂▃▄▅▆▇█"


def sparkline(values: tuple[float, ...], width: int) -> str:
    """The last `width` values as block characters scaled to their maximum (0: blank)."""
    shown = values[-width:]
    top = max(shown, default=0.0)
    if top <= 0:
        return " " * len(shown)
    return "".join(BLOCKS[round(v / top * (len(BLOCKS) - 1))] if v > 0 else " " for v in shown)


def time_axis(last_second: int, width: int, every: int = 10) -> str:
    """The sparklines' time axis: their `width` columns are the virtual seconds up to `last_second`; a label
    (`╵40s`, the mark on its column) starts at each column whose second is a multiple of `every`, where it fits."""
    first = last_second - width + 1
    cells = [" "] * width
    free = 0
    for column in range(width):
        second = first + column
        label = f"╵{second}s"
        if second >= 0 and second % every == 0 and column >= free and column + len(label) <= width:
            cells[column:column + len(label)] = label
            free = column + len(label) + 1
    return "".join(cells)


def mean_ms(values: tuple[float, ...], digits: int) -> str:
    """Mean of the seconds that had a value (a second with none is 0), or `-`."""
    seen = [v for v in values if v > 0]
    return f"{sum(seen) / len(seen):.{digits}f}ms" if seen else "-"


class RequestsView(FrameView):
    """Request rates and latencies of the last minute of virtual time."""

    def draw(self, frame: Frame, width: int) -> Text:
        r = frame.requests
        spark = max(min(width - 30, len(r.arrivals)), 10)
        out = Text()
        out.append(f"arrived {r.total_arrived}  completed {r.total_completed}  ")
        out.append(f"failed {r.total_failed}", style="bold red" if r.total_failed else "")
        if r.total_aborted:  # clients that went away
            out.append(f"  aborted {r.total_aborted}")
        out.append(f"  in flight {r.in_flight}\n")
        rows = (
            ("arrivals/s", tuple(float(v) for v in r.arrivals), f"{sum(r.arrivals[-10:]) / 10:6.1f}/s", "cyan"),
            ("completed/s", tuple(float(v) for v in r.completions), f"{sum(r.completions[-10:]) / 10:6.1f}/s", "green"),
            ("failed/s", tuple(float(v) for v in r.failures), f"{sum(r.failures[-10:]) / 10:6.1f}/s", "red"),
            ("TTFT ms", r.ttft_ms, mean_ms(r.ttft_ms[-10:], 0), "magenta"),
            ("ITL ms", r.itl_ms, mean_ms(r.itl_ms[-10:], 1), "yellow"),
        )
        for label, values, figure, style in rows:
            out.append(f"{label:<12}{figure:>9} ")
            out.append(sparkline(values, spark) + "\n", style=style)
        out.append(f"{'':<22}")
        out.append(time_axis(frame.now_ns // NS, spark) + "\n", style="dim")
        out.append(f"{'':<22}(one column per virtual second, figures: last 10 s)\n", style="dim")
        out.append("KV cache\n", style="bold")
        for replica, used, total, dead in r.kv:
            share = used / total if total else 0.0
            bar = max(width - 72, 10)
            out.append(f"  {replica:<20} {share:6.1%} ")
            out.append("█" * round(share * bar), style="cyan")
            out.append("░" * (bar - round(share * bar)) + f" {used}/{total} blocks", style="bright_black")
            out.append(" (engine dead)\n" if dead else "\n", style="bold red")
        out.append("errors\n" if r.errors else "errors: none\n", style="bold")
        for message, count in r.errors:
            out.append(f"  {count:>5} × {message}\n", style="red")  # wrapped at the view's width, never cut
        return out
