"""The layers of DESIGN.md: the scenario package imports no engine; the engine no server or UI library; the
telemetry model neither (the engine builds it, the API renders it); the API no UI and the TUI no server (the
feed they share is the engine's). The TUI's board (records folded for the views) imports no UI library."""

from __future__ import annotations

import subprocess

FORBIDDEN = {
    "aisim.scenario": ["aisim.engine", "aisim.api", "aisim.tui", "tornado", "textual", "rich"],
    "aisim.engine": ["aisim.api", "aisim.tui", "aisim.cli", "tornado", "textual", "rich"],
    "aisim.api": ["aisim.tui", "textual", "rich"],
    "aisim.tui": ["aisim.api", "aisim.cli", "tornado"],
    "aisim.replay": ["aisim.api", "aisim.tui", "aisim.cli", "tornado", "textual", "rich"],
    "aisim.telemetry": ["aisim.engine", "aisim.api", "aisim.tui", "aisim.cli", "tornado", "textual", "rich"],
}


ALLOWED_LIBRARIES = {"aisim.replay": ["httpx"]}
"""Libraries a layer may use whose own imports are not the layer's: httpx imports click and rich for its
command line whenever click is installed (huggingface_hub, which `tokenizers` needs, brings click)."""


def test_layers_import_only_what_they_may(python: str) -> None:
    for module, forbidden in FORBIDDEN.items():
        libraries = "".join(f"import {name}\n" for name in ALLOWED_LIBRARIES.get(module, []))
        code = (
            f"import sys, pkgutil, importlib\n{libraries}before = set(sys.modules)\nimport {module}\n"
            f"for info in pkgutil.iter_modules({module}.__path__): importlib.import_module('{module}.' + info.name)\n"
            f"bad = [m for m in {forbidden!r} if m in sys.modules and m not in before]\n"
            "print(','.join(bad))"
        )
        run = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
        assert run.stdout.strip() == "", f"{module} imports {run.stdout.strip()}"


def test_tui_board_is_headless(python: str) -> None:
    code = "import sys, aisim.tui.board\nprint(','.join(m for m in ('textual', 'rich', 'tornado') if m in sys.modules))"
    run = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "", f"aisim.tui.board imports {run.stdout.strip()}"
