"""The layers of DESIGN.md: the scenario package imports no engine, server or UI library."""

from __future__ import annotations

import subprocess

FORBIDDEN = {"aisim.scenario": ["aisim.engine", "aisim.api", "aisim.tui", "tornado", "textual", "rich"]}


def test_scenario_package_imports_only_its_own_layer(python: str) -> None:
    for module, forbidden in FORBIDDEN.items():
        code = (
            f"import sys, {module}, {module}.loader, {module}.schema\n"
            f"bad = [m for m in {forbidden!r} if m in sys.modules]\n"
            "print(','.join(bad))"
        )
        run = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
        assert run.stdout.strip() == "", f"{module} imports {run.stdout.strip()}"
