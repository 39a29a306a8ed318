"""Model versions: the state machine, load times, hot switches without losing requests, rollback."""

from __future__ import annotations

import pytest

from aisim.engine.lifecycle import (
    EDGES,
    IllegalTransition,
    Lifecycle,
    State,
    incompatibility,
    load_time_ns,
)
from aisim.engine.report import build_report
from aisim.scenario import load_scenario
from aisim.scenario.models import Compatibility, Model, Version
from aisim.scenario.presets import GPU_PROFILES

from .conftest import SCENARIOS
from .engine_helpers import poisson, run, scenario


def _model(**extra: object) -> Model:
    return Model.model_validate({"id": "m", "family": "llama-3-8b", "placement": {"gpus": ["g"]},
                                 "versions": [{"version": "1"}, {"version": "2"}], **extra})


def test_transitions_follow_the_edges_and_nothing_else() -> None:
    seen: list[tuple[int, str, str, str]] = []
    life = Lifecycle(_model(), lambda t, v, s, r: seen.append((t, v, s, r)))
    life.move("1", State.LOADING, 0)
    life.move("1", State.READY, 5)
    with pytest.raises(IllegalTransition):
        life.move("1", State.LOADING, 6)
    with pytest.raises(IllegalTransition):
        life.move("2", State.READY, 6)
    assert [s for _, _, s, _ in seen] == ["LOADING", "READY"]
    assert State.READY in EDGES[State.DEGRADED] and State.UNAVAILABLE in EDGES[State.LOADING]


def test_load_time_is_weights_over_the_slower_of_storage_and_pcie_plus_start_up() -> None:
    model = _model()
    h100, t4 = GPU_PROFILES["H100-SXM"], GPU_PROFILES["T4"]
    fast = Version.model_validate({"version": "1", "load": {"storageBandwidth": "100GB/s"}})
    # 16.06 GB over PCIe 5 x16 (64 GB/s) = 0.25 s, over PCIe 3 (15.75 GB/s) = 1.02 s, plus vLLM's 5 s start-up
    assert load_time_ns(model, fast, h100) == 5_000_000_000 + model.weight_bytes() * 10**9 // (64 * 10**9)
    assert load_time_ns(model, fast, t4) > load_time_ns(model, fast, h100)
    given = Version.model_validate({"version": "1", "load": {"time": "3s"}})
    assert load_time_ns(model, given, t4) == 3_000_000_000


def test_incompatible_inputs_block_a_switch_and_extra_outputs_are_allowed() -> None:
    base = Version.model_validate({"version": "1", "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 3]}],
                                   "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 10]}]})
    more = base.model_copy(update={"version": "2", "outputs": [*base.outputs, base.outputs[0].model_copy(update={"name": "z"})]})
    wider = base.model_copy(update={"version": "3", "inputs": [base.inputs[0].model_copy(update={"shape": [-1, 4]})]})
    assert incompatibility(more, base, Compatibility()) is None
    assert "changes shape" in incompatibility(wider, base, Compatibility())  # type: ignore[operator]
    assert "added" in incompatibility(more, base, Compatibility(outputs="exact"))  # type: ignore[operator]


def test_hot_swap_switches_degrades_rolls_back_and_loses_no_request() -> None:
    sim = run(load_scenario(SCENARIOS / "hot-swap.yaml"), base_dir=SCENARIOS)
    states = [(r["t_ns"] // 10**9, r["version"], r["state"]) for r in sim.timeline.records() if r["type"] == "model_state"]
    assert (30, "2", "LOADING") in states and (50, "2", "READY") in states  # loads in its 20 s
    degraded = [t for t, v, s in states if v == "2" and s == "DEGRADED"]
    assert degraded and degraded[0] >= 60 + 30  # switched at 60 s, breach held for the 30 s window
    report = build_report(sim)["models"]["mistral-chat"]
    assert report["versions"] == {"active": "1", "states": {"1": "READY", "2": "DEGRADED"}, "rollbacks": 1, "refused": []}
    assert report["requests"]["arrived"] == report["requests"]["completed"]
    served = {r["replica"] for r in sim.timeline.records() if r["type"] == "request_scheduled"}
    assert served == {"mistral-chat/0", "mistral-chat@v2/0"}


def test_refused_actions_are_recorded_not_fatal() -> None:
    versions = [{"version": "1", "inputs": [{"name": "x", "datatype": "FP32", "shape": [4]}]},
                {"version": "2", "inputs": [{"name": "x", "datatype": "INT64", "shape": [4]}]}]
    lifecycle = {"schedule": [{"at": "1s", "action": "switch", "version": "2"},
                              {"at": "2s", "action": "load", "version": "2"},
                              {"at": "30s", "action": "switch", "version": "2"},
                              {"at": "31s", "action": "unload", "version": "1"}]}
    model = {"id": "m", "family": "llama-3-8b", "placement": {"gpus": ["g"]}, "versions": versions, "lifecycle": lifecycle,
             "engine": {"gpuMemoryUtilization": 0.45}}
    sim = run(scenario([model], [poisson("2/s", 20, 100, 20)]))
    refused = build_report(sim)["models"]["m"]["versions"]["refused"]
    assert len(refused) == 3
    assert "it is INIT" in refused[0] and "changes datatype FP32 -> INT64" in refused[1] and "is serving" in refused[2]
    assert all(r.outcome == "completed" for r in sim.requests)


def test_a_failing_load_leaves_the_version_unavailable_with_its_reason() -> None:
    versions = [{"version": "1"}, {"version": "2", "load": {"time": "1s", "fail": "missing plugin"}}]
    model = {"id": "m", "family": "llama-3-8b", "placement": {"gpus": ["g"]}, "versions": versions,
             "lifecycle": {"schedule": [{"at": "1s", "action": "load", "version": "2"}]}}
    sim = run(scenario([model], [poisson("2/s", 5, 100, 20)]))
    last = [r for r in sim.timeline.records() if r["type"] == "model_state" and r["version"] == "2"][-1]
    assert (last["state"], last["reason"]) == ("UNAVAILABLE", "missing plugin")


def test_a_second_version_that_does_not_fit_beside_the_first_fails_vllms_start_up_check() -> None:
    versions = [{"version": "1"}, {"version": "2", "load": {"time": "1s"}}]
    model = {"id": "m", "family": "llama-3-8b", "placement": {"gpus": ["g"]}, "versions": versions,
             "lifecycle": {"schedule": [{"at": "1s", "action": "load", "version": "2"}]}}
    sim = run(scenario([model], [poisson("2/s", 5, 100, 20)]))
    last = [r for r in sim.timeline.records() if r["type"] == "model_state" and r["version"] == "2"][-1]
    assert last["state"] == "UNAVAILABLE"
    assert last["reason"].startswith("ValueError: Free memory on device cuda:0 (")
    assert "is less than desired GPU memory utilization (0.9, " in last["reason"]
    assert all(r.outcome == "completed" for r in sim.requests)  # version 1 keeps serving
