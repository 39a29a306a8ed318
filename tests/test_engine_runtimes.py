"""Runtime personalities at load: TensorRT compatibility, ONNX Runtime settings, vLLM's log lines."""

from __future__ import annotations

from aisim.engine.runtimes import load_problem, provider_warnings, step_factor
from aisim.scenario.models import Model
from aisim.scenario.presets import GPU_PROFILES

from .engine_helpers import batch, llama, run, scenario

T4, A100, L4 = GPU_PROFILES["T4"], GPU_PROFILES["A100-80GB"], GPU_PROFILES["L4"]


def _trt(**plan: object) -> Model:
    return Model.model_validate({"id": "m", "family": "resnet-50", "runtime": "tensorrt", "placement": {"gpus": ["g"]},
                                 "versions": [{"version": "1", "tensorrt": plan}]})


def _ort(**settings: object) -> Model:
    return Model.model_validate({"id": "m", "family": "resnet-50", "runtime": "onnxruntime",
                                 "placement": {"gpus": ["g"]}, "versions": [{"version": "1", "onnxruntime": settings}]})


def test_tensorrt_plans_need_their_plugins_version_and_architecture() -> None:
    ok = _trt(plugins=["Gelu"], availablePlugins=["Gelu"])
    assert load_problem(ok, ok.versions[0], T4) is None
    missing = _trt(plugins=["Gelu"])
    assert "IPluginCreator not found in Plugin Registry" in load_problem(missing, missing.versions[0], T4)  # type: ignore[operator]
    old = _trt(trtVersion="8.6.1", runtimeVersion="10.12.0.36")
    assert "expecting library version 10.12.0.36 got 8.6.1" in load_problem(old, old.versions[0], T4)  # type: ignore[operator]
    assert load_problem(_trt(trtVersion="8.6.1", versionCompatible=True), _trt().versions[0], T4) is None
    other_gpu = _trt(builtFor="8.6")
    assert "expecting compute 8.6 got compute 7.5" in load_problem(other_gpu, other_gpu.versions[0], T4)  # type: ignore[operator]
    ampere = _trt(builtFor="8.6", hardwareCompatibility="ampere_plus")
    assert load_problem(ampere, ampere.versions[0], L4) is None  # 8.9 is Ampere or newer
    assert load_problem(ampere, ampere.versions[0], T4) is not None  # 7.5 is not


def test_onnxruntime_optimisation_level_and_providers() -> None:
    factors = [step_factor(m, m.versions[0]) for m in (_ort(optimizationLevel=level) for level in
                                                       ("all", "extended", "basic", "disable"))]
    assert factors == sorted(factors) and factors[0] == 1.0 and factors[-1] > factors[0]
    cpu = _ort(providers=["CPUExecutionProvider"])
    assert step_factor(cpu, cpu.versions[0]) > 10
    odd = _ort(providers=["OpenVINOExecutionProvider", "CUDAExecutionProvider"])
    [warning] = provider_warnings(odd, odd.versions[0])
    assert warning.startswith("UserWarning: Specified provider 'OpenVINOExecutionProvider' is not in available provider names.")


def test_vllm_start_up_lines_are_on_the_timeline() -> None:
    sim = run(scenario([llama()], [batch(1, 10, 10)]))
    lines = [r["message"] for r in sim.timeline.records() if r["type"] == "log"]
    blocks = sim.models["m"].plans[0].num_blocks
    assert f"# cuda blocks: {blocks}, # CPU blocks: 0" in lines
    assert f"GPU KV cache size: {blocks * 16:,} tokens" in lines
    assert any(line.startswith("Model loading took 14.9575 GiB") for line in lines)
