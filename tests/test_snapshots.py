"""Golden outputs: the report of every shipped scenario and small timelines, one syrupy extension per format.

The bytes are the contract: a change to the engine that moves a number shows up here, and the
snapshot is updated (`pytest --snapshot-update`) only after reading the diff.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from aisim.engine.report import build_report
from aisim.engine.simulation import Simulation
from aisim.scenario import load_scenario

from .conftest import SCENARIOS, TEST_SCENARIOS


class JsonSnapshot(SingleFileSnapshotExtension):
    """A JSON document, indented, as the file's text."""

    file_extension = "json"
    _write_mode = WriteMode.TEXT


class JsonLinesSnapshot(SingleFileSnapshotExtension):
    """A timeline as JSON lines."""

    file_extension = "jsonl"
    _write_mode = WriteMode.TEXT


def _run(path: Path) -> Simulation:
    sim = Simulation(load_scenario(path), path.parent)
    sim.run()
    return sim


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.stem)
def test_report_of_each_shipped_scenario(path: Path, snapshot) -> None:  # type: ignore[no-untyped-def]
    report = build_report(_run(path))
    assert json.dumps(report, indent=2) + "\n" == snapshot(extension_class=JsonSnapshot)


@pytest.mark.parametrize("name", ["timeline-small.yaml", "timeline-preemption.yaml"])
def test_small_timelines(name: str, snapshot) -> None:  # type: ignore[no-untyped-def]
    sim = _run(TEST_SCENARIOS / "timelines" / name)
    out = io.StringIO()
    sim.timeline.write_jsonl(out)
    assert out.getvalue() == snapshot(extension_class=JsonLinesSnapshot)
