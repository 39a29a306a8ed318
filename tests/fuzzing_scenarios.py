"""The scenario half of the fuzz harness: shipped scenarios, mutated as data and as text, through the loader and
a short `aisim run` (tests/test_fuzz_scenarios.py, and the longer bench/fuzz_scenarios.py).

A mutated scenario must be either rejected with problem records (never a traceback) or valid, and a valid one
must run: `Simulation` built and run for `RUN_NS` of virtual time, within `RUN_WALL_S` of wall time.
"""

from __future__ import annotations

import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import strategies as st

from aisim.engine.report import build_report
from aisim.engine.simulation import Simulation
from aisim.scenario import check_text
from aisim.scenario.source import parse

from .conftest import SCENARIOS, TEST_SCENARIOS
from .fuzzing import dump, mutated

RUN_NS = 2 * 10**9
"""Virtual time a valid mutated scenario runs for."""

RUN_WALL_S = 20.0
"""Wall time after which a run counts as a hang (`aisim run` of 2 s takes well under a second)."""

SHIPPED = sorted([*SCENARIOS.glob("*.yaml"), *(TEST_SCENARIOS / "valid").glob("*.yaml"),
                  *(TEST_SCENARIOS / "serve").glob("*.yaml")])
"""The scenarios the mutations start from (all valid)."""

TEXT_DAMAGE = [
    ("", "\nextra: !!python/object/apply:os.system [echo]\n"), ("", "\nx: !custom {a: 1}\n"),
    ("", "\nx: &a [1, 2]\ny: [*a, *a, *a]\n"), ("", "\nx: *undefined\n"), ("", "\n\t- bad indent\n"),
    ("", "\nseed: 1" + "0" * 5000 + "\n"), ("", "\nx: " + "[" * 2000 + "]" * 2000 + "\n"),
    ("", "\n" + "\n".join(f"b{d}: &b{d} [" + ", ".join([f"*b{d - 1}" if d else "lol"] * 9) + "]" for d in range(9)) + "\n"),
    ("", "\nkind: Scenario\n"), ("", "\n? [complex, key]\n: value\n"), ("", "\n%YAML 1.1\n---\n"), ("", "\x00"),
]
"""Text appended (or put in front) of a scenario: tags, aliases, bombs, syntax errors, duplicate keys."""


@st.composite
def scenario_texts(draw: st.DrawFn) -> tuple[str, str]:
    """(the scenario it came from, a mutated scenario text): its data mutated and written as JSON (which is
    YAML), or its text damaged."""
    path = draw(st.sampled_from(SHIPPED))
    text = path.read_text(encoding="utf-8")
    if draw(st.integers(0, 4)) == 0:
        before, after = draw(st.sampled_from(TEXT_DAMAGE))
        return path.name, before + text + after if draw(st.booleans()) else after.lstrip("\n") + "\n" + text
    data = parse(text, path.name).data
    return path.name, dump(draw(mutated(data, 5)))


@dataclass
class ScenarioTally:
    """What the mutated scenarios came to."""

    checked: int = 0
    valid: int = 0
    rejected: int = 0
    ran: int = 0
    rules: Counter[str] = field(default_factory=Counter)
    tracebacks: list[tuple[str, str]] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    slowest_check_s: float = 0.0

    def summary(self) -> str:
        return (f"{self.checked} mutated scenarios: {self.valid} validated, {self.rejected} rejected, {self.ran} ran; "
                f"tracebacks {len(self.tracebacks)}; hangs {len(self.hangs)}; slowest validation "
                f"{self.slowest_check_s * 1e3:.0f} ms; most frequent problems {self.rules.most_common(6)}")


class _TooLong(Exception):
    """A run past its wall-time bound."""


def check_and_run(origin: str, text: str, base_dir: Path, tally: ScenarioTally) -> None:
    """Validate one mutated text and, when valid, run it briefly; every exception is a traceback counted."""
    tally.checked += 1
    start = time.perf_counter()
    try:
        checked = check_text(text, f"mutated-{origin}", base_dir)
    except Exception:  # noqa: BLE001 - what the fuzzing looks for
        tally.tracebacks.append((text[:2000], traceback.format_exc()))
        return
    finally:
        tally.slowest_check_s = max(tally.slowest_check_s, time.perf_counter() - start)
    if checked.scenario is None:
        tally.rejected += 1
        tally.rules.update(p.rule for p in checked.problems if p.severity == "error")
        return
    tally.valid += 1
    deadline = time.perf_counter() + RUN_WALL_S

    def watch(_: int) -> None:
        if time.perf_counter() > deadline:
            raise _TooLong

    try:
        simulation = Simulation(checked.scenario, checked.base_dir)
        simulation.run(RUN_NS, watch)
        build_report(simulation)
    except _TooLong:
        tally.hangs.append(text[:2000])
        return
    except Exception:  # noqa: BLE001 - a scenario that validates must run
        tally.tracebacks.append((text[:2000], traceback.format_exc()))
        return
    tally.ran += 1
