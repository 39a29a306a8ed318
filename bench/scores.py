"""Error statistics the fidelity benches print: median and p90 |error| and the signed median, per group.

An error is predicted / measured - 1, in percent. A `Scored` item carries its group labels (GPU, model, TP, ...)
and, per metric, (predicted, measured); a metric the item lacks is skipped for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Scored:
    """One measured item and what the simulator predicted for it."""

    labels: dict[str, str]
    values: dict[str, tuple[float, float]] = field(default_factory=dict)
    """metric -> (predicted, measured)."""

    def error(self, metric: str) -> float | None:
        pair = self.values.get(metric)
        if pair is None or not pair[1]:
            return None
        return (pair[0] / pair[1] - 1) * 100


def stats(errors: Sequence[float]) -> tuple[int, float, float, float]:
    """(n, median |error|, p90 |error|, signed median), in percent."""
    if not errors:
        return 0, float("nan"), float("nan"), float("nan")
    e = np.asarray(errors, dtype=float)
    return len(e), float(np.median(np.abs(e))), float(np.quantile(np.abs(e), 0.9)), float(np.median(e))


def cell(errors: Sequence[float]) -> str:
    n, median, p90, signed = stats(errors)
    if not n:
        return f"{'-':>27}"
    return f"{median:6.1f} {p90:6.1f} {signed:+7.1f} {n:5d}"


def header(metrics: Sequence[str], width: int = 30) -> str:
    top = f"{'':{width}} " + " ".join(f"{m:^27}" for m in metrics)
    sub = f"{'group':{width}} " + " ".join(f"{'med|e|':>6} {'p90|e|':>6} {'signed':>7} {'n':>5}" for _ in metrics)
    return f"{top}\n{sub}"


def table(title: str, items: Iterable[Scored], metrics: Sequence[str], groupings: Sequence[str],
          width: int = 30) -> list[str]:
    """Lines: `title`, then all items, then one row per value of each grouping (label key)."""
    items = list(items)
    lines = [title, header(metrics, width)]

    def row(name: str, chosen: list[Scored]) -> str:
        cols = []
        for m in metrics:
            cols.append(cell([e for e in (s.error(m) for s in chosen) if e is not None]))
        return f"{name[:width]:{width}} " + " ".join(cols)

    lines.append(row("all", items))
    for key in groupings:
        for value in sorted({s.labels[key] for s in items}, key=_order):
            lines.append(row(f"{key} {value}", [s for s in items if s.labels[key] == value]))
    return lines


def _order(value: str) -> tuple[int, str]:
    """Numbers in numeric order (TP 2 before TP 16), then names."""
    return (int(value), "") if value.isdigit() else (1 << 30, value)


def medians(items: Iterable[Scored], metric: str) -> tuple[float, float]:
    """(median |error|, signed median) of one metric over the items."""
    _, median, _, signed = stats([e for e in (s.error(metric) for s in items) if e is not None])
    return median, signed
