"""Freeze the installed aisim into one executable with PyInstaller (run by `scripts/build-executable`).

It runs inside the build's own virtual environment, where aisim (not editable) and PyInstaller are
installed, and writes `DIST/aisim`. What PyInstaller cannot see by reading the imports is named here
and in `pyinstaller-hooks/hook-aisim.py`: the package data (the shipped scenarios, the calibration),
aisim's sources, Textual's lazily imported widgets and Rich's Unicode tables (both load by name).
"""

from __future__ import annotations

import argparse
from pathlib import Path

ENTRY = "import sys\n\nfrom aisim.cli import main\n\nsys.exit(main())\n"
"""The frozen program's `__main__` (aisim/__main__.py imports relatively, which a script cannot)."""

HOOKS = Path(__file__).resolve().parent / "pyinstaller-hooks"
"""aisim's own hook: its data files, and its sources beside the compiled modules."""

HIDDEN = ("textual.widgets", "rich._unicode_data")
"""Packages whose modules are imported by name at run time, so that every module must go in."""

LEFT_OUT = ("scipy", "onnx", "tritonclient", "tkinter", "pytest", "IPython")
"""Optional extras (calibrate, inspect, the Triton client) and what nothing in aisim needs."""


def arguments(dist: Path, work: Path) -> list[str]:
    """PyInstaller's command line."""
    entry = work / "aisim_main.py"
    work.mkdir(parents=True, exist_ok=True)
    entry.write_text(ENTRY, encoding="utf-8")
    args = ["--onefile", "--name", "aisim", "--noconfirm", "--clean", "--log-level", "WARN",
            "--distpath", str(dist), "--workpath", str(work / "build"), "--specpath", str(work),
            "--additional-hooks-dir", str(HOOKS)]
    for package in HIDDEN:
        args += ["--collect-submodules", package]
    for module in LEFT_OUT:
        args += ["--exclude-module", module]
    return [*args, str(entry)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dist", type=Path, required=True, help="folder the executable goes to")
    parser.add_argument("--work", type=Path, required=True, help="PyInstaller's scratch folder")
    options = parser.parse_args()
    import PyInstaller.__main__

    PyInstaller.__main__.run(arguments(options.dist, options.work))


if __name__ == "__main__":
    main()
