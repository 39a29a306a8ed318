"""Workloads as benchmark clients define them: inference-perf's stages, timers, shared_prefix generator,
request timeout, its per-stage lifecycle report and overload, through the CLI as a user runs them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aisim.engine.client_report import stage_metrics
from aisim.engine.simulation import Simulation
from aisim.engine.workload import SourceFeed
from aisim.scenario import check_text

from .conftest import ROOT
from .engine_helpers import scenario

LLAMA = {"id": "m", "family": "llama-2-7b", "placement": {"gpus": ["g"]},
         "engine": {"maxNumBatchedTokens": 2048, "maxNumSeqs": 128, "maxModelLen": 4096}}
PROMPTS = {"systemPrompts": 3, "usersPerSystemPrompt": 2, "systemPromptTokens": 64, "questionTokens": 100,
           "outputTokens": 20}


def _source(**more: Any) -> dict[str, Any]:
    return {"name": "ip", "model": "m", "promptSet": PROMPTS,
            "arrival": {"kind": "stages", "stages": [{"rate": "10/s", "duration": "30s"}, {"rate": "20/s", "duration": "10s"}],
                        "gap": "2s"}, **more}


def _arrivals(source: dict[str, Any], seed: int = 1) -> list[Any]:
    s = scenario([LLAMA], [source])
    return list(SourceFeed(0, s.workload.sources[0], np.random.default_rng(seed), Path("."), {}, None))


def test_constant_timer_sends_rate_times_duration_per_stage_spread_like_inference_perf() -> None:
    arrivals = _arrivals(_source())
    first = [a.time for a in arrivals if a.stage == 0]
    second = [a.time for a in arrivals if a.stage == 1]
    assert (len(first), len(second)) == (300, 200)
    assert first[-1] == 30 * 10**9  # the gaps are scaled to sum to the stage
    assert second[0] > 32 * 10**9 and second[-1] == 42 * 10**9  # the next starts `gap` after the last arrival
    gaps = np.diff(first) / 1e9
    assert abs(gaps.std() / gaps.mean() - 1) < 0.2  # exponential gaps, not even spacing


def test_poisson_timer_counts_per_second_and_stops_after_rate_times_duration() -> None:
    source = _source()
    source["arrival"] = {"kind": "stages", "timer": "poisson", "stages": [{"rate": "50/s", "duration": "40s"}]}
    times = np.array([a.time for a in _arrivals(source)])
    assert len(times) == 2000 and np.all(np.diff(times) >= 0)
    per_second = np.bincount((times // 10**9).astype(int))[:39]
    assert abs(per_second.mean() - 50) < 3 and 3 < per_second.var() < 150  # Poisson counts: variance ~ mean


def test_prompt_set_cycles_its_prompts_each_stage_and_a_multi_turn_session_repeats_its_whole_prompt() -> None:
    """A user's prompt comes back as the same text each round, single turn or multi-turn (a session's context
    does not grow in the measured runs: `PromptSet.multiTurn`), so the cache chain is the whole prompt."""
    for prompts in (PROMPTS, {**PROMPTS, "multiTurn": True}):
        arrivals = _arrivals(_source(promptSet=prompts))
        assert {(a.prompt, a.output) for a in arrivals} == {(164, 20)}
        stage0 = [a.group for a in arrivals if a.stage == 0]
        stage1 = [a.group for a in arrivals if a.stage == 1]
        assert stage0[:6] == stage0[6:12] == stage1[:6] and len(set(stage0[:6])) == 6  # whole prompts come back
        assert {a.prefix for a in arrivals} == {163}


def test_a_late_request_is_a_client_failure_and_the_run_is_overloaded_from_when_the_queue_grew() -> None:
    source = _source(timeout="20s")
    source["arrival"] = {"kind": "stages", "stages": [{"rate": "40/s", "duration": "60s"}]}
    source["promptSet"] = {**PROMPTS, "outputTokens": 1500, "multiTurn": True}
    sim = Simulation(scenario([LLAMA], [source]))
    sim.run()
    [stage] = stage_metrics(sim).values()
    aborted = [r for r in sim.requests if r.outcome == "aborted"]
    assert stage.failures == len(aborted) > 0 and stage.overloaded and 0 < stage.overloaded_from_s < 30
    assert all(r.finished_at - r.arrival == 20 * 10**9 for r in aborted)  # the client gives up at its timeout
    assert sim.kernel.now < 60 * 10**9 + 25 * 10**9  # and nothing outlives the run (timeouts are cancelled)
    light = _source()
    light["arrival"] = {"kind": "stages", "stages": [{"rate": "2/s", "duration": "60s"}]}
    sim = Simulation(scenario([LLAMA], [light]))
    sim.run()
    assert not any(s.overloaded for s in stage_metrics(sim).values())


@pytest.mark.parametrize(("source", "path", "words"), [
    ({"promptTokens": 10}, "$.workload.sources[0]", "promptSet gives the lengths"),
    ({"arrival": {"kind": "stages", "stages": [{"rate": "1/s"}]}}, "$.workload.sources[0].arrival.stages[0]", "duration"),
    ({"arrival": {"kind": "stages", "timer": "even", "stages": [{"rate": "1/s", "duration": "1s"}]}},
     "$.workload.sources[0].arrival.timer", "constant"),
])
def test_bad_stages_and_prompt_sets_are_problems_with_their_place(source: dict[str, Any], path: str, words: str) -> None:
    text = json.dumps({"apiVersion": "aisim/v1", "kind": "Scenario", "metadata": {"name": "t"},
                       "gpus": [{"id": "g", "profile": "H100-SXM"}], "models": [LLAMA],
                       "workload": {"sources": [_source(**source)]}}, indent=1)
    checked = check_text(text, "t.json")
    assert not checked.valid
    problem = next(p for p in checked.problems if p.path.startswith(path))
    assert words in problem.message and problem.line > 1 and problem.column > 0


INFERENCE_PERF = """\
load:
  type: constant
  interval: 1
  stages:
    - {rate: 4, duration: 15}
    - {rate: 8, duration: 10}
  request_timeout: 60
api: {type: completion, streaming: true}
server: {type: vllm, model_name: meta-llama/Llama-2-7b-hf, base_url: 'http://0.0.0.0:8000', ignore_eos: true}
data:
  type: shared_prefix
  shared_prefix:
    num_unique_system_prompts: 4
    num_users_per_system_prompt: 3
    system_prompt_len: 100
    question_len: 300
    output_len: 50
    enable_multi_turn_chat: true
report: {request_lifecycle: {summary: true, per_stage: true}}
"""

SCENARIO_HEAD = """\
apiVersion: aisim/v1
kind: Scenario
metadata: {name: imported}
gpus: [{id: g, profile: H100-SXM}]
models:
  - id: llama
    family: llama-2-7b
    placement: {gpus: [g]}
    engine: {maxNumBatchedTokens: 2048, maxNumSeqs: 128, maxModelLen: 4096}
"""


def _aisim(python: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-m", "aisim", *args], capture_output=True, text=True, cwd=ROOT, check=False)


def test_an_inference_perf_config_imported_and_run_writes_its_per_stage_reports(python: str, tmp_path: Path) -> None:
    config = tmp_path / "config.yml"
    config.write_text(INFERENCE_PERF)
    imported = _aisim(python, "workload", "import", "inference-perf", str(config), "--model", "llama")
    assert imported.returncode == 0, imported.stderr
    run_file = tmp_path / "run.yaml"
    run_file.write_text(SCENARIO_HEAD + imported.stdout)
    out = tmp_path / "results"
    ran = _aisim(python, "run", str(run_file), "--report", "inference-perf", str(out), "--quiet")
    assert ran.returncode == 0, ran.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "stage_0_lifecycle_metrics.json", "stage_1_lifecycle_metrics.json", "summary_lifecycle_metrics.json"]
    stages = [json.loads((out / f"stage_{i}_lifecycle_metrics.json").read_text()) for i in (0, 1)]
    summary = json.loads((out / "summary_lifecycle_metrics.json").read_text())
    for stage, rate, count in zip(stages, (4.0, 8.0), (60, 80)):
        assert set(stage) == {"load_summary", "successes", "failures", "aisim"}
        assert stage["load_summary"]["requested_rate"] == rate and stage["load_summary"]["count"] == count
        assert stage["successes"]["count"] + stage["failures"]["count"] == count
        latency = stage["successes"]["latency"]
        assert set(latency) == {"request_latency", "normalized_time_per_output_token", "time_per_output_token",
                                "time_to_first_token", "inter_token_latency"}
        ttft, e2e, tpot, itl = (latency[k] for k in ("time_to_first_token", "request_latency", "time_per_output_token",
                                                     "inter_token_latency"))
        assert {"mean", "min", "max", "median", "p0.1", "p90", "p99", "p99.9"} <= set(ttft)
        assert 0 < ttft["mean"] < e2e["mean"] and tpot["min"] <= itl["mean"] <= tpot["max"] * 1.5
        assert stage["successes"]["output_len"]["mean"] == 50 and stage["aisim"]["overloaded"] is False
    assert summary["load_summary"]["count"] == 140 and "requested_rate" not in summary["load_summary"]


def test_import_refuses_what_it_cannot_follow(python: str, tmp_path: Path) -> None:
    config = tmp_path / "config.yml"
    config.write_text(INFERENCE_PERF.replace("type: constant", "type: trace_replay"))
    refused = _aisim(python, "workload", "import", "inference-perf", str(config))
    assert refused.returncode == 1 and "load.type: 'trace_replay' is not supported" in refused.stderr


def _ttfts(cost_model: dict[str, Any], entrypoint: str = "server") -> tuple[Simulation, list[int], list[int]]:
    model = {**LLAMA, "costModel": cost_model, "engine": {**LLAMA["engine"], "entrypoint": entrypoint}}
    sim = Simulation(scenario([model], [{"name": "p", "model": "m", "arrival": {"kind": "poisson", "rate": "5/s"},
                                          "requests": 40, "promptTokens": 300, "outputTokens": 30}]))
    sim.run()
    return sim, [r.first_token_at - r.arrival for r in sim.requests], [r.finished_at - r.first_token_at for r in sim.requests]


def test_the_api_servers_time_adds_to_ttft_and_e2e_but_not_to_the_time_per_token() -> None:
    _, ttft0, decode0 = _ttfts({"frontend": 0})
    _, ttft10, decode10 = _ttfts({"frontend": "10ms"})
    assert [b - a for a, b in zip(ttft0, ttft10)] == [10_000_000] * 40 and decode0 == decode10


def test_the_offline_entrypoint_has_the_same_engine_and_the_llm_class_limits() -> None:
    from aisim.engine.costmodel import calibration

    offline, _, _ = _ttfts({}, "offline")
    server, _, _ = _ttfts({})
    [replica_off] = offline.served_models[0].engines
    [replica_on] = server.served_models[0].engines
    fitted = calibration.efficiency("H100-SXM")[0]
    assert replica_off.cost.efficiency == fitted == replica_on.cost.efficiency
    assert offline.served_models[0].frontend_ns == 0
    assert server.served_models[0].frontend_ns == calibration.host()["frontend_ns"] > 0
    model = {**LLAMA, "engine": {"entrypoint": "offline"}}
    sim = Simulation(scenario([model], [{"name": "p", "model": "m", "arrival": {"kind": "batch", "requests": 1},
                                          "promptTokens": 10, "outputTokens": 1}]))
    assert sim.served_models[0].engines[0].max_tokens == 16384  # the LLM class's default on an H100
