"""The engine obeys the physics and the queueing behaviour a real vLLM server shows."""

from __future__ import annotations

import numpy as np

from aisim.engine.costmodel import CostModel, calibration
from aisim.engine.memory import kv_bytes_per_token, plan
from aisim.engine.report import build_report
from aisim.scenario.presets import GPU_PROFILES, MODEL_FAMILIES

from .engine_helpers import batch, llama, poisson, run, scenario


def _itl_mean(report: dict) -> float:
    return report["models"]["m"]["itl"]["mean"]


def test_batch_one_decode_is_never_faster_than_weights_over_peak_bandwidth() -> None:
    for gpu in ("H100-SXM", "A100-40GB", "L4", "T4", "MI300X"):
        for family in ("llama-3-8b", "llama-2-7b", "mistral-7b"):
            arch, profile = MODEL_FAMILIES[family], GPU_PROFILES[gpu]
            cost = CostModel(arch, profile, calibration.efficiency(gpu)[0], 1, kv_bytes_per_token(arch, 1))
            floor = arch.params * 2 / profile.memory_bandwidth * 1e9
            assert cost.step_ns(1, 1, 100, 101) >= floor


def test_ttft_grows_with_prompt_length() -> None:
    ttfts = []
    for prompt in (128, 1024, 4096):
        report = build_report(run(scenario([llama()], [batch(1, prompt, 8)])))
        ttfts.append(report["models"]["m"]["ttft"]["mean"])
    assert ttfts[0] < ttfts[1] < ttfts[2]


def test_itl_grows_with_batch_size_and_throughput_saturates() -> None:
    itl, throughput = [], []
    for size in (1, 16, 64, 256):
        report = build_report(run(scenario([llama()], [batch(size, 512, 256)])))
        itl.append(_itl_mean(report))
        throughput.append(report["models"]["m"]["throughput"]["output_tokens_per_s"])
    assert itl == sorted(itl) and itl[0] < itl[-1]
    gains = np.diff(throughput) / np.array(throughput[:-1])
    assert throughput == sorted(throughput)
    assert gains[-1] < gains[0]  # each step up in batch buys less


def test_queueing_time_explodes_past_capacity() -> None:
    queue = []
    for rate in ("2/s", "8/s", "40/s"):
        s = scenario([llama(maxNumSeqs=8)], [poisson(rate, 300, 1000, 200)])
        queue.append(build_report(run(s))["models"]["m"]["queue"]["mean"])
    assert queue[0] < queue[1] < queue[2]
    assert queue[2] > 20 * max(queue[0], 1e-3)


def test_llama3_8b_on_one_h100_has_the_kv_capacity_vllm_reports() -> None:
    s = scenario([llama(gpuMemoryUtilization=0.9)], [batch(1, 10, 10)])
    memory = plan(s.models[0], s.gpus[0].resolved())
    assert 400_000 <= memory.kv_tokens <= 500_000
    assert memory.kv_bytes_per_token == 128 * 1024


def test_a_decode_run_equals_its_steps_one_by_one() -> None:
    arch, profile = MODEL_FAMILIES["llama-3-8b"], GPU_PROFILES["H100-SXM"]
    cost = CostModel(arch, profile, calibration.efficiency("H100-SXM")[0], 1, kv_bytes_per_token(arch, 1))
    series = cost.decode_series(7, 5000, 50)
    assert series == [cost.step_ns(7, 7, 5000 + 7 * k, 5000 + 7 * k + 7) for k in range(50)]
    rng = np.random.default_rng(7)  # in and out of CUDA graphs, to the nanosecond
    for requests, context, steps in zip(rng.integers(1, 700, 40), rng.integers(0, 400_000, 40), rng.integers(1, 80, 40)):
        series = cost.decode_series(int(requests), int(context), int(steps))
        assert series == [cost.step_ns(int(requests), int(requests), int(context + requests * k),
                                                int(context + requests * k + requests)) for k in range(steps)]


def test_tensor_parallelism_speeds_up_a_memory_bound_decode() -> None:
    arch, profile = MODEL_FAMILIES["llama-3-70b"], GPU_PROFILES["H100-SXM"]
    efficiency = calibration.efficiency("H100-SXM")[0]
    tp2 = CostModel(arch, profile, efficiency, 2, kv_bytes_per_token(arch, 2)).step_ns(8, 8, 8000, 8008)
    tp4 = CostModel(arch, profile, efficiency, 4, kv_bytes_per_token(arch, 4)).step_ns(8, 8, 8000, 8008)
    assert tp4 < tp2
