"""The long scenario fuzz run, for before a release: the mutations of tests/fuzzing_scenarios.py over the
shipped scenarios, each validated and, when valid, run for 2 s of virtual time.

    python bench/fuzz_scenarios.py [--examples 3000]

Prints: mutated scenarios checked, validated, rejected, run, tracebacks, hangs, the slowest validation and
the most frequent problem rules; then each traceback's last line with the start of its text.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hypothesis import given

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the harness lives with the tests

from tests.conftest import SCENARIOS
from tests.fuzzing import fuzz_settings
from tests.fuzzing_scenarios import ScenarioTally, check_and_run, scenario_texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=3000)
    args = parser.parse_args()
    tally = ScenarioTally()
    started = time.perf_counter()

    @fuzz_settings(args.examples)
    @given(scenario_texts())
    def run(pair: tuple[str, str]) -> None:
        check_and_run(*pair, SCENARIOS, tally)

    run()
    print(f"{tally.summary()}; {time.perf_counter() - started:.0f} s")
    for text, error in tally.tracebacks[:10]:
        print(f"  traceback: {error.strip().splitlines()[-1][:200]} <- {text[:150]!r}")
    for text in tally.hangs[:5]:
        print(f"  hang: {text[:200]!r}")


if __name__ == "__main__":
    main()
