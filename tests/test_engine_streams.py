"""Engine replicas sharing GPUs through streams: contention, priorities, classes, kernel detail."""

from __future__ import annotations

import statistics

from aisim.engine.report import build_report
from aisim.engine.simulation import Simulation
from aisim.scenario import load_scenario

from .conftest import SCENARIOS
from .engine_helpers import batch, llama, poisson, run, scenario


def _chat_kernels(sim: Simulation) -> list[dict[str, int]]:
    return [r for r in sim.timeline.records() if r["type"] == "kernel" and r["replica"].startswith("chat")]


def test_priorities_keep_chat_kernels_at_their_solo_time_and_without_them_they_share_the_sms() -> None:
    with_priorities = run(load_scenario(SCENARIOS / "priorities.yaml"), base_dir=SCENARIOS)
    without = run(load_scenario(SCENARIOS / "priorities-off.yaml"), base_dir=SCENARIOS)
    protected = _chat_kernels(with_priorities)
    # every chat kernel runs alone once it has the SMs: its span is its solo time
    assert all(k["t_ns"] - k["start_ns"] == k["work_ns"] for k in protected)
    # without priorities it shares the SMs with the embedding stream, which is on them except during
    # its own host phases: between 1.5x and 2x its solo time
    stretch = statistics.median((k["t_ns"] - k["start_ns"]) / k["work_ns"] for k in _chat_kernels(without))
    assert 1.5 < stretch <= 2.0
    # and the chat model's inter-token gaps are its steps (host time plus that kernel span), one per
    # decoded token, in both runs
    for sim in (with_priorities, without):
        gaps = [r["end_ns"] - r["t_ns"] for r in sim.timeline.records()
                if r["type"] == "step" and r["replica"].startswith("chat") for _ in range(r["decode_tokens"])]
        itl = build_report(sim)["models"]["chat"]["itl"]["p50"] * 1e9
        assert abs(itl - statistics.median(gaps)) < 0.02 * itl
    on, off = (build_report(sim)["models"]["chat"]["itl"] for sim in (with_priorities, without))
    assert off["p50"] > 1.5 * on["p50"] and off["p99"] > 1.3 * on["p99"]
    streams = build_report(with_priorities)["gpus"]["gpu0"]["streams"]
    assert streams["preemptions"] > 0 and streams["by_stream"]["interactive"]["stretch"] < 1.01
    assert build_report(without)["gpus"]["gpu0"]["streams"]["preemptions"] == 0


def test_two_models_on_one_gpu_slow_each_other_down() -> None:
    other = {**llama(gpuMemoryUtilization=0.4), "id": "n"}
    sources = [batch(8, 500, 100), {**batch(8, 500, 100), "name": "other", "model": "n"}]
    alone = run(scenario([llama(gpuMemoryUtilization=0.4)], sources[:1]))
    together = run(scenario([llama(gpuMemoryUtilization=0.4), other], sources))
    e2e_alone = max(r.finished_at for r in alone.requests)
    e2e_together = max(r.finished_at for r in together.requests if r.model == "m")
    assert 1.3 * e2e_alone < e2e_together < 2.0 * e2e_alone  # GPU time is shared, host time is not


def test_a_request_class_with_its_own_stream_launches_its_steps_there() -> None:
    gpus = [{"id": "g", "profile": "H100-SXM", "streams": [{"name": "fast", "priority": -3}, {"name": "default"}]}]
    classes = [{"name": "vip", "priority": 0, "stream": "fast"}]
    models = [llama(gpuMemoryUtilization=0.4), {**llama(gpuMemoryUtilization=0.4), "id": "n"}]
    sources = [{**batch(2, 100, 10), "priorityClass": "vip"}, {**batch(2, 100, 10), "name": "plain", "model": "n"}]
    sim = run(scenario(models, sources, gpus=gpus, priorityClasses=classes))
    streams = {(r["replica"], r["stream"]) for r in sim.timeline.records() if r["type"] == "step"}
    assert streams == {("m/0", "fast"), ("n/0", "default")}


def test_per_layer_kernels_give_the_same_steps_as_one_kernel_per_step_on_an_idle_gpu() -> None:
    sources = [poisson("5/s", 30, 300, 40)]
    coarse = build_report(run(scenario([llama()], sources)))
    fine_sim = run(scenario([llama()], sources, simulation={"detail": "layer"}))
    fine = build_report(fine_sim)
    for key in ("ttft", "itl", "e2e", "queue"):
        assert fine["models"]["m"][key] == coarse["models"]["m"][key]
    records = fine_sim.timeline.records()
    layers = {r["name"] for r in records if r["type"] == "kernel"}
    assert layers == {f"layer{i}" for i in range(32)} | {"logits"}
    copies = {(r["direction"], r["stream"], r["name"]) for r in records if r["type"] == "copy"}
    assert copies == {("h2d", "default", "inputs"), ("d2h", "default.out", "tokens")}
