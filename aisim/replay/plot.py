"""Recorded against replayed latency over time, as one self-contained HTML page of SVG charts.

One chart per latency (TTFT, E2E): x is each request's arrival (s), y its latency (ms), a dot per
request for the recorded log and one for the replay. The page needs no script and no network (so
no plotting library either: a few SVG circles are all it draws), and the same logs give the same
bytes.
"""

from __future__ import annotations

import html
from pathlib import Path

from .records import RequestLog

WIDTH, HEIGHT, MARGIN = 900, 300, 50
COLOURS = {"recorded": "#1f77b4", "replayed": "#d62728"}
MAX_POINTS = 5000
"""Dots per series at most (every n-th request beyond), so that a long trace stays a light page."""


def _series(log: RequestLog, metric: str) -> list[tuple[float, float]]:
    points = [(r.arrival_ns / 1e9, getattr(r, metric) * 1e3) for r in log.requests
              if r.completed and getattr(r, metric) is not None]
    step = max(1, -(-len(points) // MAX_POINTS))
    return points[::step]


def _chart(metric: str, series: dict[str, list[tuple[float, float]]]) -> str:
    points = [p for values in series.values() for p in values]
    if not points:
        return f"<p>{metric.upper()}: no values</p>"
    x_max = max(x for x, _ in points) or 1.0
    y_max = max(y for _, y in points) or 1.0

    def sx(x: float) -> float:
        return MARGIN + x / x_max * (WIDTH - 2 * MARGIN)

    def sy(y: float) -> float:
        return HEIGHT - MARGIN - y / y_max * (HEIGHT - 2 * MARGIN)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-size="12">',
             f'<line x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH - MARGIN}" y2="{HEIGHT - MARGIN}" stroke="black"/>',
             f'<line x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{HEIGHT - MARGIN}" stroke="black"/>',
             f'<text x="{WIDTH / 2}" y="{HEIGHT - 12}" text-anchor="middle">arrival (s), 0 to {x_max:.3g}</text>',
             f'<text x="{MARGIN}" y="{MARGIN - 10}">{metric.upper()} (ms), 0 to {y_max:.4g}</text>']
    for row, (name, values) in enumerate(series.items()):
        colour = COLOURS[name]
        parts.append(f'<text x="{WIDTH - MARGIN}" y="{MARGIN - 10 + 14 * row}" text-anchor="end" fill="{colour}">'
                     f'{name} ({len(values)})</text>')
        parts += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2" fill="{colour}" fill-opacity="0.6"/>' for x, y in values]
    parts.append("</svg>")
    return "\n".join(parts)


def write_plot(path: str | Path, recorded: RequestLog, replayed: RequestLog, title: str) -> None:
    """Write the page: TTFT and E2E of both logs over arrival time."""
    charts = [_chart(metric, {"recorded": _series(recorded, metric), "replayed": _series(replayed, metric)})
              for metric in ("ttft", "e2e")]
    body = "\n".join(f"<h2>{m.upper()}</h2>\n{c}" for m, c in zip(("ttft", "e2e"), charts))
    Path(path).write_text(f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                          f"</head><body><h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n", encoding="utf-8")
