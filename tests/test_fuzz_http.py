"""Fuzzed requests against both personalities over real sockets (see tests/fuzzing.py): no traceback, no
500 without a real server's reason, no hang, `/health` answering meanwhile, and the model lists unchanged by
requests that failed. Seeded (`derandomize`) and bounded: a few hundred requests per personality; the longer
run is `python bench/fuzz_http.py`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from aisim.testing import running_server

from .conftest import TEST_SCENARIOS
from .fuzzing import (
    SPEED,
    Case,
    LogCatcher,
    Tally,
    kserve_cases,
    openai_cases,
    run_batch,
)

FUZZ = settings(max_examples=12, derandomize=True, deadline=None, database=None, phases=[Phase.generate],
                suppress_health_check=list(HealthCheck))
PERSONALITIES = {"openai": (TEST_SCENARIOS / "serve" / "fuzz-openai.yaml", openai_cases),
                 "kserve": (TEST_SCENARIOS / "serve" / "triton.yaml", kserve_cases)}


@pytest.fixture(scope="module")
def catcher() -> Iterator[LogCatcher]:
    with LogCatcher().installed() as caught:
        yield caught


@pytest.mark.parametrize("personality", sorted(PERSONALITIES))
def test_fuzzed_requests_never_crash_hang_or_change_state(personality: str, catcher: LogCatcher) -> None:
    scenario, strategy = PERSONALITIES[personality]
    tally = Tally()
    with running_server(scenario, speed=SPEED) as url:

        @FUZZ
        @given(st.lists(strategy, min_size=25, max_size=25))
        def fuzz(batch: list[Case]) -> None:
            asyncio.run(run_batch(url, personality, batch, tally))  # records, never raises: asserted below

        fuzz()
    print(personality, tally.summary(len(catcher.tracebacks())))
    assert catcher.tracebacks() == []
    assert tally.hangs == []
    assert tally.unexplained_500 == []
    assert tally.changed == []
