"""Runs of steps added by value (`Timeline.add_run`) read back as the columns they describe, in the order every run
was added, whenever they are made into columns."""

from __future__ import annotations

import random

import numpy as np
import pytest

from aisim.engine import timeline as timeline_module
from aisim.engine.timeline import StepRun, Timeline


def _runs(seed: int) -> list[tuple[str, int, list[int], int, int, int, list[int]]]:
    """(replica, start, ends, requests, prefill, decode, KV blocks in use) of consecutive runs of two replicas."""
    rng = random.Random(seed)
    clock = {"a": 0, "b": 5}
    runs = []
    for _ in range(60):
        replica = rng.choice("ab")
        start = clock[replica] + rng.randrange(0, 3)
        ends = []
        end = start
        for _ in range(rng.randrange(1, 9)):
            end += rng.randrange(1, 1000)
            ends.append(end)
        clock[replica] = end
        used = [rng.randrange(0, 500) for _ in ends]
        runs.append((replica, start, ends, rng.randrange(1, 9), rng.randrange(0, 2048), rng.randrange(0, 9), used))
    return runs


def _expected(replica: str, start: int, ends: list[int], requests: int, prefill: int, decode: int,
              used: list[int]) -> list[list[int]]:
    return [[start, *ends[:-1]], ends, [requests] * len(ends), [prefill] * len(ends), [decode] * len(ends), used]


def _columns(run: StepRun) -> list[list[int]]:
    return [column.tolist() for column in (run.starts, run.ends, run.requests, run.prefill_tokens, run.decode_tokens,
                                           run.kv_used)]


@pytest.mark.parametrize("pending", [1 << 15, 7])
def test_runs_added_by_value_read_back_as_their_columns_in_order(pending: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read once at the end, part way through, and (`pending` = 7) made into columns every few steps; one run added as
    a `StepRun` in between keeps its place."""
    monkeypatch.setattr(timeline_module, "PENDING_STEPS", pending)
    timeline = Timeline()
    runs = _runs(1)
    nine = np.array([9], dtype=np.int64)
    direct = StepRun("c", ("gpu1",), "s", nine, nine + 1, nine, nine, nine, nine, 77)
    for index, (replica, start, ends, requests, prefill, decode, used) in enumerate(runs):
        timeline.add_run(replica, ("gpu0",), "default", start, ends, requests, prefill, decode, used, 1000)
        if index == 20:
            assert len(timeline.steps) == 21  # read part way
        if index == 30:
            timeline.add_steps(direct)
    steps = list(timeline.steps)
    assert len(steps) == timeline.added_steps == len(runs) + 1
    assert steps[31] is direct
    del steps[31]
    for run, (replica, start, ends, requests, prefill, decode, used) in zip(steps, runs, strict=True):
        assert (run.replica, run.gpus, run.stream, run.kv_total) == (replica, ("gpu0",), "default", 1000)
        assert _columns(run) == _expected(replica, start, ends, requests, prefill, decode, used)
        assert all(column.dtype == np.int64 for column in (run.starts, run.ends, run.kv_used))


def test_a_rolling_timeline_keeps_the_most_recent_runs_and_counts_every_one() -> None:
    timeline = Timeline(max_records=5)
    runs = _runs(2)
    for replica, start, ends, requests, prefill, decode, used in runs[:12]:
        timeline.add_run(replica, (), "default", start, ends, requests, prefill, decode, used, 10)
    assert timeline.added_steps == 12
    recent = timeline.recent_steps(9)
    assert [_columns(run) for run in recent] == [_expected(*run) for run in runs[9:12]]
    assert [_columns(run) for run in timeline.steps] == [_expected(*run) for run in runs[7:12]]
