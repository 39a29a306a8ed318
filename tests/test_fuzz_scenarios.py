"""Mutated shipped scenarios through the loader and a short run (see tests/fuzzing_scenarios.py): each is
rejected with problem records or runs; never a traceback, never a hang. Seeded (`derandomize`) and bounded;
the longer run is `python bench/fuzz_scenarios.py`."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given

from .conftest import SCENARIOS
from .fuzzing import fuzz_settings
from .fuzzing_scenarios import SHIPPED, ScenarioTally, check_and_run, scenario_texts


def test_mutated_scenarios_are_rejected_with_problems_or_run() -> None:
    tally = ScenarioTally()

    @fuzz_settings(150)
    @given(scenario_texts())
    def fuzz(pair: tuple[str, str]) -> None:
        check_and_run(*pair, SCENARIOS, tally)  # records, never raises: the tally is asserted once, below

    fuzz()
    print(tally.summary())
    assert tally.tracebacks == []
    assert tally.hangs == []
    assert tally.valid > 0 and tally.rejected > 0  # the mutations reach both sides


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_scenario_the_mutations_start_from_runs(path: Path) -> None:
    """The unmutated starting points validate and run too: a valid scenario that crashes the engine (as a GPU
    given by its own `hardware` numbers once did, in the cost model's lookup by profile name) would otherwise
    count only among the fuzzer's tracebacks, and only when hypothesis happened to draw it."""
    tally = ScenarioTally()
    check_and_run(path.name, path.read_text(encoding="utf-8"), path.parent, tally)
    assert (tally.tracebacks, tally.hangs, tally.ran) == ([], [], 1)
