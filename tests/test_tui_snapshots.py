"""SVG snapshots of each TUI view on `scenarios/oom.yaml` at fixed virtual instants.

The simulation is moved on the virtual clock and the app draws one frame at mount (`fps=0`), so
nothing depends on the wall clock. Update with `pytest tests/test_tui_snapshots.py --snapshot-update`
after reading the report (and the SVGs).
"""

from __future__ import annotations

from typing import Any

import pytest

from aisim.tui.app import AisimTui

from .test_tui import NS, oom_source

SIZE = (100, 34)


@pytest.mark.parametrize(("view", "seconds"), [
    ("memory", 30.0),   # weights and KV cache in the pool, usage above the warning threshold
    ("memory", 46.0),   # after the OOM: the engine died, its memory is back, the hog holds the rest
    ("streams", 44.0),  # decode steps on the default stream
    ("states", 46.0),   # the version is UNAVAILABLE (engine died)
    ("requests", 60.0),
    ("log", 46.0),
])
def test_view(snap_compare: Any, view: str, seconds: float) -> None:
    app = AisimTui(oom_source(int(seconds * NS)), fps=0, view=view)
    assert snap_compare(app, terminal_size=SIZE)


def test_help_screen(snap_compare: Any) -> None:
    app = AisimTui(oom_source(10 * NS), fps=0)
    assert snap_compare(app, press=["question_mark"], terminal_size=SIZE)
