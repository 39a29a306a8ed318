"""vLLM V1 scheduling: token budget, chunked prefill, preemption, priorities, prefix caching; nothing lost."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import pytest

from aisim.engine import gpu_memory, simulation
from aisim.engine.pool import stats as pool_stats
from aisim.engine.replica import Replica
from aisim.engine.report import build_report
from aisim.engine.simulation import Simulation

from .engine_helpers import batch, llama, poisson, run, scenario


def _steps(sim):  # type: ignore[no-untyped-def]
    return [r for r in sim.timeline.records() if r["type"] == "step"]


def _assert_nothing_lost(sim) -> None:  # type: ignore[no-untyped-def]
    assert all(r.outcome in ("completed", "failed") for r in sim.requests)
    for served in sim.served_models:
        for engine in served.engines:
            if isinstance(engine, Replica):
                assert engine.kv.used == 0 and not engine.running and engine.waiting == 0


def test_steps_respect_the_token_budget_and_max_num_seqs() -> None:
    sim = run(scenario([llama(maxNumBatchedTokens=512, maxNumSeqs=4)], [batch(10, 1000, 20)]))
    steps = _steps(sim)
    assert max(s["prefill_tokens"] + s["decode_tokens"] for s in steps) <= 512
    assert max(s["requests"] for s in steps) <= 4
    _assert_nothing_lost(sim)


def test_long_prompts_are_prefilled_in_chunks_beside_running_decodes() -> None:
    sim = run(scenario([llama(maxNumBatchedTokens=256)], [batch(1, 64, 200), poisson("5/s", 1, 2000, 5)]))
    mixed = [s for s in _steps(sim) if s["prefill_tokens"] and s["decode_tokens"]]
    assert mixed, "a prefill chunk should share steps with the running decode"
    assert all(s["prefill_tokens"] + s["decode_tokens"] <= 256 for s in mixed)
    _assert_nothing_lost(sim)


def test_kv_pressure_preempts_by_recompute_and_every_request_still_completes() -> None:
    engine = {"kvCacheMemory": 64 * 2 * 2**20, "maxNumSeqs": 64, "maxModelLen": 1024}  # 64 blocks = 1,024 tokens
    sim = run(scenario([llama(**engine)], [batch(8, 100, 200)]))
    report = build_report(sim)
    assert report["models"]["m"]["preemptions"] > 0
    assert report["models"]["m"]["requests"]["completed"] == 8
    preempted = {r["request"] for r in sim.timeline.records() if r["type"] == "request_preempted"}
    assert preempted and max(preempted) >= 5  # the last admitted go first under FCFS
    _assert_nothing_lost(sim)


def test_priority_policy_serves_urgent_requests_first() -> None:
    sources = [
        {**batch(40, 500, 50), "name": "bulk", "priorityClass": "bulk"},
        {**batch(5, 500, 50), "name": "urgent", "priorityClass": "urgent",
         "arrival": {"kind": "batch", "requests": 5, "at": "10ms"}},
    ]
    classes = [{"name": "bulk", "priority": 10}, {"name": "urgent", "priority": 0}]
    queue = {}
    for policy in ("fcfs", "priority"):
        sim = run(scenario([llama(maxNumSeqs=4, schedulingPolicy=policy)], sources, priorityClasses=classes))
        urgent = [r for r in sim.requests if r.source == "urgent"]
        queue[policy] = sum(r.scheduled_at - r.arrival for r in urgent) / len(urgent)
        _assert_nothing_lost(sim)
    assert queue["priority"] < queue["fcfs"] / 4


def test_prefix_caching_hits_shared_prefixes_and_cuts_ttft() -> None:
    shared = {"groups": 1, "tokens": 2048, "fraction": 1.0}
    ttft = {}
    for caching in (True, False):
        sim = run(scenario([llama(enablePrefixCaching=caching)], [poisson("2/s", 40, 2200, 10, sharedPrefix=shared)]))
        report = build_report(sim)
        ttft[caching] = report["models"]["m"]["ttft"]["mean"]
        if caching:
            assert report["models"]["m"]["prefix_cache_hit_rate"] > 0.8
        _assert_nothing_lost(sim)
    assert ttft[True] < ttft[False] / 2


def test_requests_longer_than_the_context_fail_with_vllms_message() -> None:
    sim = run(scenario([llama(maxModelLen=1024)], [batch(2, 1000, 100)]))
    assert {r.outcome for r in sim.requests} == {"failed"}
    assert "maximum context length is 1024 tokens" in sim.requests[0].error


def test_a_model_whose_kv_cache_cannot_hold_one_request_fails_to_load() -> None:
    sim = run(scenario([llama(gpuMemoryUtilization=0.2)], [batch(1, 10, 10)]))
    report = build_report(sim)
    assert report["models"]["m"]["state"] == "FAILED"
    assert "No available memory for the cache blocks" in report["models"]["m"]["failure"]
    assert sim.requests[0].outcome == "failed"


def test_runs_of_decode_steps_give_exactly_the_step_by_step_result() -> None:
    cases = [
        scenario([llama()], [poisson("6/s", 120, {"kind": "lognormal", "median": 600, "sigma": 0.8, "max": 6000},
                                     "10-400")]),
        scenario([llama(kvCacheMemory=300 * 2 * 2**20, maxNumSeqs=32, maxModelLen=4096)], [poisson("20/s", 60, "100-800", "50-300")]),
        scenario([llama(schedulingPolicy="priority")],
                 [poisson("8/s", 80, 300, "20-200", sharedPrefix={"groups": 3, "tokens": 256})]),
        scenario([llama(asyncScheduling=False)], [poisson("20/s", 60, "100-800", "50-300")]),
        scenario([llama(entrypoint="offline", asyncScheduling=True)], [poisson("20/s", 60, "100-800", "50-300")]),
    ]
    for s in cases:
        fast, slow = run(s, macro_steps=True), run(s, macro_steps=False)
        assert fast.timeline.records() == slow.timeline.records()
        assert build_report(fast) == {**build_report(slow), "events": build_report(fast)["events"]}
        assert fast.kernel.processed < slow.kernel.processed


MOCK = {"id": "m", "latency": {"ttft": "20ms", "interToken": "5ms"}}


@pytest.mark.parametrize("model", [llama(), MOCK], ids=["vllm", "mock"])
def test_a_serving_simulation_holds_no_memory_for_past_requests(monkeypatch: pytest.MonkeyPatch,
                                                                model: dict[str, Any]) -> None:
    """A server's simulation (`retain=False`) runs for ever: once its timeline window is full, four times
    the requests must hold no more memory (each request's inter-token gaps used to stay: 400-800 bytes a request).
    The bounded memos (step shapes, allocator round trips owed) are made small so that both runs fill them."""
    monkeypatch.setattr(simulation, "ROLLING_RECORDS", 100)
    monkeypatch.setattr(gpu_memory, "EAGER_SHAPES", 16)
    monkeypatch.setattr(pool_stats, "OWED_AT_MOST", 16)

    def held(requests: int) -> int:
        gc.collect()
        tracemalloc.start()
        try:
            sim = Simulation(scenario([model], [poisson("200/s", requests, 64, 16)]), macro_steps=False, retain=False)
            sim.run()
            gc.collect()
            return tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()

    held(100)  # one-off allocations (caches, imports) land here
    few, many = held(500), held(2000)
    assert many - few < 1500 * 20, f"{(many - few) / 1500:.0f} bytes per extra request"


def _first_step_after_arrival(sim) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    """(index of the step running when a request reached the engine, index of its first step) for each
    request that arrived during a step."""
    steps = _steps(sim)
    starts = [s["t_ns"] for s in steps]
    arrived = {r["request"]: r["t_ns"] for r in sim.timeline.records() if r["type"] == "request_arrived"}
    pairs = []
    for r in sim.timeline.records():
        if r["type"] == "request_scheduled":
            at = arrived[r["request"]]
            during = [k for k, s in enumerate(steps) if s["t_ns"] < at < s["end_ns"]]
            if during:
                pairs.append((during[0], starts.index(r["t_ns"])))
    return pairs


@pytest.mark.parametrize("overlapped", [False, True], ids=["sync", "async"])
def test_async_scheduling_runs_a_request_arriving_mid_step_in_the_step_after_next(overlapped: bool) -> None:
    # offline entrypoint: no API-server time, so a request reaches the engine when it arrives
    model = llama(entrypoint="offline", asyncScheduling=overlapped)
    sim = run(scenario([model], [poisson("30/s", 60, 40, 60)]))
    pairs = _first_step_after_arrival(sim)
    assert len(pairs) > 30  # light load: every request is admitted at the first schedule that sees it
    assert all(first == during + (2 if overlapped else 1) for during, first in pairs)
    _assert_nothing_lost(sim)


def test_async_scheduling_is_the_server_default_and_a_switch() -> None:
    s = scenario([llama()], [poisson("30/s", 40, 40, 60)])
    assert s.models[0].engine.overlapped()
    off = scenario([llama(asyncScheduling=False)], [poisson("30/s", 40, 40, 60)])
    assert not off.models[0].engine.overlapped()
    assert not scenario([llama(entrypoint="offline")], [batch(1, 10, 1)]).models[0].engine.overlapped()
    ttft = [build_report(run(x))["models"]["m"]["ttft"]["mean"] for x in (s, off)]  # type: ignore[index]
    assert ttft[0] > ttft[1]
