"""Screenshots of the TUI's five views for docs/tui/: SVG from Textual's own export, PNG from the SVG.

    python scripts/tui_screenshots.py [OUT]   # default docs/tui

Each view is drawn on `scenarios/oom.yaml`, paused at a fixed virtual instant (the simulation is moved on the
virtual clock, as the snapshot tests do), on a 100 x 34 terminal. The PNGs are rendered by a headless
chromium (`apt-get install chromium`) when there is one, and reduced to 32 colours with Pillow when it is
installed (matplotlib brings it: a quarter of the size, the text as sharp); without chromium only the SVGs are
written.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from aisim.scenario import load_scenario
from aisim.tui.app import AisimTui
from aisim.tui.main import local_simulation
from aisim.tui.source import LocalSource

ROOT = Path(__file__).resolve().parent.parent

NS = 1_000_000_000
SIZE = (100, 34)
VIEWS = (("memory", 46.0), ("streams", 44.0), ("states", 46.0), ("requests", 60.0), ("log", 46.0))
"""Each view at an instant that shows it at work: just after the OOM at 45 s, decoding at 44 s, a minute in."""
PIXELS = (1300, 900)
"""The PNG's size: Textual's SVG of a 100 x 34 terminal, with its window frame."""


async def _svg(view: str, seconds: float) -> str:
    scenarios = ROOT / "scenarios"
    sim = local_simulation(load_scenario(scenarios / "oom.yaml"), scenarios)
    sim.start_workload()
    source = LocalSource(sim, paused=True)
    source.run_to(int(seconds * NS))
    app = AisimTui(source, fps=0, view=view)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        return app.export_screenshot(title=f"aisim tui scenarios/oom.yaml: {view}")


def _png(svg: Path, png: Path, browser: str) -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={profile}", f"--screenshot={png}",
                        f"--window-size={PIXELS[0]},{PIXELS[1]}", svg.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(png) as image:
        reduced = image.convert("RGB").quantize(colors=32)
    reduced.save(png, optimize=True)


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "tui"
    out.mkdir(parents=True, exist_ok=True)
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    for view, seconds in VIEWS:
        svg = out / f"{view}.svg"
        svg.write_text(asyncio.run(_svg(view, seconds)), encoding="utf-8")
        written = [svg]
        if browser:
            _png(svg, out / f"{view}.png", browser)
            written.append(out / f"{view}.png")
        print(" ".join(str(path) for path in written))
    if not browser:
        print("no chromium: SVGs only", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
