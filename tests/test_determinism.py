"""Same scenario, same seed: byte-identical report and timeline, even across processes."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from .conftest import ROOT, SCENARIOS


def _run(python: str, scenario: Path, out: Path, *extra: str) -> tuple[bytes, bytes]:
    timeline = out / "timeline.jsonl"
    run = subprocess.run([python, "-m", "aisim", "run", str(scenario), "--json", "--quiet", "--timeline", str(timeline),
                          *extra], capture_output=True, cwd=ROOT, check=True)
    return run.stdout, timeline.read_bytes()


def test_two_processes_give_byte_identical_report_and_timeline(python: str, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _run(python, SCENARIOS / "default.yaml", tmp_path / "a")
    second = _run(python, SCENARIOS / "default.yaml", tmp_path / "b")
    assert hashlib.sha256(first[0]).digest() == hashlib.sha256(second[0]).digest()
    assert first[1] == second[1] and len(first[1]) > 10_000


def test_another_seed_gives_another_run(python: str, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _run(python, SCENARIOS / "default.yaml", tmp_path / "a")
    other = _run(python, SCENARIOS / "default.yaml", tmp_path / "b", "--seed", "7")
    assert first[0] != other[0]
