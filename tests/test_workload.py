"""Arrival processes and trace files produce the requests the scenario describes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from aisim.engine.simulation import Simulation
from aisim.engine.workload import SourceFeed
from aisim.scenario import load_scenario

from .conftest import SCENARIOS
from .engine_helpers import scenario


def _arrivals(source: dict, seed: int = 1, base_dir: Path = Path(".")) -> list:  # type: ignore[type-arg]
    s = scenario([{"id": "m", "latency": {"total": "1ms"}}, {"id": "n", "latency": {"total": "1ms"}}], [source])
    rng = np.random.default_rng(seed)
    return list(SourceFeed(0, s.workload.sources[0], rng, base_dir, {}, None))


def test_poisson_arrivals_have_the_requested_rate_and_exponential_gaps() -> None:
    arrivals = _arrivals({"name": "p", "model": "m", "arrival": {"kind": "poisson", "rate": "50/s"}, "requests": 5000,
                          "promptTokens": 10, "outputTokens": 10})
    gaps = np.diff([a.time for a in arrivals]) / 1e9
    assert abs(gaps.mean() - 0.02) < 0.002
    assert abs(gaps.std() / gaps.mean() - 1) < 0.1


def test_gamma_arrivals_have_the_requested_burstiness() -> None:
    arrivals = _arrivals({"name": "g", "model": "m", "arrival": {"kind": "gamma", "rate": "10/s", "cv": 3},
                          "requests": 5000, "promptTokens": 10, "outputTokens": 10})
    gaps = np.diff([a.time for a in arrivals])
    assert abs(gaps.std() / gaps.mean() - 3) < 0.5


def test_constant_rate_closed_batch_and_model_mix() -> None:
    constant = _arrivals({"name": "c", "model": "m", "arrival": {"kind": "constant", "rate": "4/s"}, "requests": 5,
                          "promptTokens": 10, "outputTokens": 10})
    assert [a.time for a in constant] == [250_000_000 * k for k in range(1, 6)]
    closed = _arrivals({"name": "b", "mix": [{"model": "m", "weight": 3}, {"model": "n", "weight": 1}],
                        "arrival": {"kind": "batch", "requests": 4000}, "promptTokens": "10-20", "outputTokens": 5})
    assert {a.time for a in closed} == {0} and len(closed) == 4000
    share = sum(a.model == "m" for a in closed) / len(closed)
    assert abs(share - 0.75) < 0.03
    assert {a.prompt for a in closed} == set(range(10, 21))


def test_shared_prefixes_are_part_of_the_prompt() -> None:
    arrivals = _arrivals({"name": "s", "model": "m", "arrival": {"kind": "batch", "requests": 1000},
                          "promptTokens": "100-200", "outputTokens": 5,
                          "sharedPrefix": {"groups": 4, "tokens": 150, "fraction": 0.5}})
    with_prefix = [a for a in arrivals if a.group >= 0]
    assert abs(len(with_prefix) / 1000 - 0.5) < 0.06
    assert len({a.group for a in with_prefix}) == 4
    assert all(a.prompt > a.prefix == 150 for a in with_prefix)


def test_the_azure_trace_is_replayed_with_its_arrival_times_and_lengths() -> None:
    s = load_scenario(SCENARIOS / "azure-conv.yaml")
    feed = SourceFeed(0, s.workload.sources[0], np.random.default_rng(0), SCENARIOS, {}, None)
    arrivals = list(feed)
    assert len(arrivals) == 19_366
    assert arrivals[0].time == 0 and (arrivals[0].prompt, arrivals[0].output) == (374, 44)
    assert arrivals[1].time == 4_314_579_000  # 18:15:50.9951690 - 18:15:46.6805900, to the microsecond
    assert 3_500 < arrivals[-1].time / 1e9 < 3_510


def test_jsonl_traces_with_millisecond_timestamps(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_length": 7, "output_length": 3}\n'
                                      '{"timestamp": 1500, "input_length": 9, "output_length": 4}\n')
    arrivals = _arrivals({"name": "t", "model": "m", "arrival": {"kind": "trace", "file": "t.jsonl",
                                                                 "timestampUnit": "ms", "timeScale": 2}}, base_dir=tmp_path)
    assert [(a.time, a.prompt, a.output) for a in arrivals] == [(0, 7, 3), (3_000_000_000, 9, 4)]


def test_duration_and_request_caps_stop_the_workload() -> None:
    s = scenario([{"id": "m", "latency": {"total": "1ms"}}],
                 [{"name": "p", "model": "m", "arrival": {"kind": "poisson", "rate": "100/s"},
                   "promptTokens": 10, "outputTokens": 10}])
    capped = s.model_copy(update={"workload": s.workload.model_copy(update={"duration": 2_000_000_000})})
    sim = Simulation(capped)
    sim.run()
    assert 150 < len(sim.requests) < 250 and max(r.arrival for r in sim.requests) <= 2_000_000_000


def test_taking_many_draws_at_once_gives_what_one_at_a_time_gives() -> None:
    from aisim.engine.sampling import Draws
    from aisim.scenario.distributions import UniformCount

    dist = UniformCount(kind="uniform", min=0, max=10**6)
    bulk, single = Draws(dist, np.random.default_rng(1), chunk=16), Draws(dist, np.random.default_rng(1), chunk=16)
    for count in (0, 3, 5, 1, 7, 16, 2, 0, 9, 4, 16, 16, 1):  # within a chunk, to its end, across a refill
        assert bulk.take(count) == [single.next() for _ in range(count)], count


def test_sampled_prompts_of_zero_tokens_are_raised_to_one() -> None:
    """A normal of mean 1 draws many 0s: vLLM refuses an empty prompt, and the engine would never schedule one."""
    arrivals = _arrivals({"name": "z", "model": "m", "arrival": {"kind": "batch", "requests": 500},
                          "promptTokens": {"kind": "normal", "mean": 1, "stddev": 5}, "outputTokens": 0})
    assert min(a.prompt for a in arrivals) == 1
    assert {a.output for a in arrivals} == {0}  # embeddings and classifiers generate nothing


def test_trace_rows_of_zero_prompt_tokens_are_raised_to_one(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_length": 0, "output_length": 0}\n')
    arrivals = _arrivals({"name": "t", "model": "m", "arrival": {"kind": "trace", "file": "t.jsonl"}}, base_dir=tmp_path)
    assert [(a.prompt, a.output) for a in arrivals] == [(1, 0)]


def test_wide_log_normal_draws_never_overflow_into_negative_values() -> None:
    from aisim.engine.sampling import sample
    from aisim.scenario.distributions import LogNormalCount

    draws = sample(LogNormalCount(kind="lognormal", median=10_000_000, sigma=10), np.random.default_rng(1), 10_000)
    assert draws.min() >= 0


def test_long_gaps_end_the_feed_at_the_horizon_instead_of_overflowing() -> None:
    """A slow, very bursty source without a duration: gaps of centuries would overflow int64 nanoseconds."""
    from aisim.scenario.workload import MAX_DURATION

    arrivals = _arrivals({"name": "g", "model": "m", "arrival": {"kind": "gamma", "rate": "0.01/h", "cv": 100},
                          "requests": 100_000, "promptTokens": 10, "outputTokens": 10})
    times = [a.time for a in arrivals]
    assert times == sorted(times) and all(0 <= t <= MAX_DURATION for t in times)
