"""Shipped scenarios are valid; each invalid test document is reported at its line, column and path.

Invalid documents state what they expect in comment lines, yamllint style:
`# expect: LINE:COL PATH RULE`, one line per error; the reported errors must be exactly those.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from aisim.scenario import ScenarioError, check_file, load_scenario

from .conftest import ROOT, SCENARIOS, TEST_SCENARIOS

SHIPPED = sorted(SCENARIOS.glob("*.yaml"))
VALID = sorted((TEST_SCENARIOS / "valid").iterdir())
INVALID = sorted((TEST_SCENARIOS / "invalid").iterdir())
EXPECT = re.compile(r"^# expect: (\d+):(\d+) (\S+) (\S+)$", re.MULTILINE)


def test_the_issue_names_every_shipped_scenario() -> None:
    names = {p.stem for p in SHIPPED}
    assert {"default", "oom", "hot-swap", "fragmentation", "priorities", "rate-limit", "triton", "azure-conv"} <= names


@pytest.mark.parametrize("path", SHIPPED + VALID, ids=lambda p: p.name)
def test_valid_documents_have_no_errors(path: Path) -> None:
    checked = check_file(path)
    assert [p.render() for p in checked.problems if p.severity == "error"] == []
    assert checked.scenario is not None


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_scenarios_start_with_a_header_saying_what_they_show(path: Path) -> None:
    first = path.read_text().splitlines()[0]
    assert first.startswith(f"# {path.stem}: ")


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_documents_are_reported_where_the_mistake_is(path: Path) -> None:
    expected = {(int(line), int(c), p, r) for line, c, p, r in EXPECT.findall(path.read_text())}
    assert expected, f"{path.name} states no '# expect:' line"
    checked = check_file(path)
    found = {(p.line, p.column, p.path, p.rule) for p in checked.problems if p.severity == "error"}
    assert found == expected
    assert checked.scenario is None


def test_load_scenario_raises_with_every_problem() -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(TEST_SCENARIOS / "invalid" / "unknown-gpu.yaml")
    assert len(caught.value.problems) == 2
    assert "unknown GPU 'gpu9'" in str(caught.value)


def test_validate_exits_zero_on_the_shipped_scenarios(python: str) -> None:
    run = subprocess.run([python, "-m", "aisim", "validate", *map(str, SHIPPED)], capture_output=True, text=True, cwd=ROOT, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count(": valid") == len(SHIPPED)


def test_validate_renders_file_line_column_path_message_and_rule(python: str) -> None:
    bad = TEST_SCENARIOS / "invalid" / "unknown-allocator.yaml"
    run = subprocess.run([python, "-m", "aisim", "validate", str(bad)], capture_output=True, text=True, cwd=ROOT, check=False)
    assert run.returncode == 1
    assert (
        f"{bad}:12:18: error: $.gpus[0].memoryPool.allocator: 'bump' is not one of 'caching', 'buddy', 'slab' (enum)"
        in run.stdout.splitlines()
    )
