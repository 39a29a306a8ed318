"""Fuzzed requests against both personalities over real sockets (see tests/fuzzing.py): no traceback, no
500 without a real server's reason, no hang, `/health` answering meanwhile, and the model lists unchanged by
requests that failed. Seeded (`derandomize`) and bounded: a few hundred requests per personality; the longer
run is `python bench/fuzz_http.py`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .fuzzing import PERSONALITIES, LogCatcher, Tally, fuzz_personality


@pytest.fixture(scope="module")
def catcher() -> Iterator[LogCatcher]:
    with LogCatcher().installed() as caught:
        yield caught


@pytest.mark.parametrize("personality", sorted(PERSONALITIES))
def test_fuzzed_requests_never_crash_hang_or_change_state(personality: str, catcher: LogCatcher) -> None:
    tally = Tally()
    fuzz_personality(personality, 12, 25, tally)
    print(personality, tally.summary(len(catcher.tracebacks())))
    assert catcher.tracebacks() == []
    assert tally.hangs == []
    assert tally.unexplained_500 == []
    assert tally.changed == []
