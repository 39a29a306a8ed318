"""Runtime personalities: what TensorRT, ONNX Runtime and vLLM do differently when a model loads and runs.

- TensorRT (its developer guide; triton-inference-server/tensorrt_backend `src/loader.cc`): a plan needs every plugin it
  uses registered, the TensorRT version it was built with (unless built version-compatible) and the GPU architecture it
  was built on (unless hardware-compatible); otherwise deserialisation fails and Triton reports `Internal: unable to
  create TensorRT engine: <the logger's error>`.
- ONNX Runtime (its session options, microsoft/onnxruntime `onnxruntime_c_api.h`;
  triton-inference-server/onnxruntime_backend `README.md`): the graph optimisation level changes the step time (fewer
  fusions, more kernels and memory traffic: 1.5x with everything disabled, 1.15x basic, 1.05x extended, 1x for layout
  and all — a modelling assumption); a provider the build lacks is skipped with ONNX Runtime's own warning, and a list
  left without a GPU provider runs on the CPU (25x slower here).
- vLLM (vllm-project/vllm `vllm/v1/worker/gpu_worker.py`): its start-up log lines (model loading, memory
  profiling, KV cache size, maximum concurrency) go on the timeline.
"""

from __future__ import annotations

from ..scenario.models import Model, Version
from ..scenario.presets import GIB, GpuProfile
from .memory import MemoryPlan

OPTIMIZATION_FACTOR = {"disable": 1.5, "basic": 1.15, "extended": 1.05, "layout": 1.0, "all": 1.0}
GPU_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider")
AVAILABLE_PROVIDERS = (*GPU_PROVIDERS, "CPUExecutionProvider")
"""What a GPU build of ONNX Runtime offers."""
CPU_FACTOR = 25.0
"""Step-time multiplier on the CPU provider (a server CPU at ~4 % of a datacenter GPU here; an assumption)."""


def load_problem(model: Model, version: Version, gpu: GpuProfile) -> str | None:
    """Why the runtime cannot load this version on this GPU (the text Triton shows), or None."""
    if model.resolved_runtime() != "tensorrt" or version.tensorrt is None:
        return None
    plan = version.tensorrt
    missing = [p for p in plan.plugins if p not in plan.available_plugins]
    if missing:
        error = ("[pluginV2Runner.cpp::load::290] Error Code 1: Serialization (Serialization assertion creator "
                 "failed.Cannot deserialize plugin since corresponding IPluginCreator not found in Plugin Registry)")
        return f"Internal: unable to create TensorRT engine: {error} (plugin {missing[0]})"
    if plan.trt_version != plan.runtime_version and not plan.version_compatible:
        return ("Internal: unable to create TensorRT engine: IRuntime::deserializeCudaEngine: Error Code 6: API Usage "
                f"Error (The engine plan file is not compatible with this version of TensorRT, expecting library "
                f"version {plan.runtime_version} got {plan.trt_version}, please rebuild.)")
    built = plan.built_for or gpu.compute_capability
    if built != gpu.compute_capability and not _hardware_compatible(plan.hardware_compatibility, built, gpu):
        return ("Internal: unable to create TensorRT engine: IRuntime::deserializeCudaEngine: Error Code 6: API Usage "
                f"Error (The engine plan file is generated on an incompatible device, expecting compute {built} got "
                f"compute {gpu.compute_capability}, please rebuild.)")
    return None


def _hardware_compatible(level: str, built: str, gpu: GpuProfile) -> bool:
    if level == "ampere_plus":
        return _capability(gpu.compute_capability) >= (8, 0)
    return False


def _capability(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else (0, 0)


def step_factor(model: Model, version: Version) -> float:
    """Step-time multiplier of the runtime's settings (ONNX Runtime's optimisation level and provider)."""
    if model.resolved_runtime() != "onnxruntime" or version.onnxruntime is None:
        return 1.0
    settings = version.onnxruntime
    on_gpu = any(p in GPU_PROVIDERS for p in settings.providers)
    return OPTIMIZATION_FACTOR[settings.optimization_level] * (1.0 if on_gpu else CPU_FACTOR)


def provider_warnings(model: Model, version: Version) -> list[str]:
    """ONNX Runtime's warning for each provider the build lacks (they are skipped, CPU remains)."""
    if model.resolved_runtime() != "onnxruntime" or version.onnxruntime is None:
        return []
    available = ", ".join(AVAILABLE_PROVIDERS)
    return [f"UserWarning: Specified provider '{p}' is not in available provider names.Available providers: '{available}'"
            for p in version.onnxruntime.providers if p not in AVAILABLE_PROVIDERS]


def load_log(model: Model, plan: MemoryPlan, seconds: float) -> list[str]:
    """vLLM's start-up log lines for this memory plan (V0/early-V1 wording, numbers as vLLM prints them)."""
    if model.resolved_runtime() != "vllm" or not plan.has_kv:
        return [f"Model loading took {plan.weights / GIB:.4f} GiB and {seconds:.6f} seconds"]
    return [
        f"Model loading took {plan.weights / GIB:.4f} GiB and {seconds:.6f} seconds",
        (f"the current vLLM instance can use total_gpu_memory ({plan.capacity / GIB:.2f}GiB) x gpu_memory_utilization "
        f"({model.engine.gpu_memory_utilization:.2f}) = {plan.requested / GIB:.2f}GiB"),
        (f"model weights take {plan.weights / GIB:.2f}GiB; non_torch_memory takes {plan.non_torch / GIB:.2f}GiB; "
        f"PyTorch activation peak memory takes {plan.activation_peak / GIB:.2f}GiB; the rest of the memory reserved "
        f"for KV Cache is {plan.kv_available / GIB:.2f}GiB."),
        f"# cuda blocks: {plan.num_blocks}, # CPU blocks: 0",
        f"GPU KV cache size: {plan.kv_tokens:,} tokens",
        f"Maximum concurrency for {plan.max_model_len:,} tokens per request: {plan.max_concurrency:.2f}x",
    ]
