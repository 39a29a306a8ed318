"""Predicted step times under tensor parallelism (predictions, not measurements): Llama-3-8B at TP
1/2/4 and Llama-3-70B at TP4 on H100-SXM and A100-80GB, decode at batch 1 and 32 (512 context
tokens a request) and one 512-token prefill. Run: `python bench/tp_steps.py`."""

from __future__ import annotations

from aisim.engine.costmodel import CostModel, calibration
from aisim.engine.memory import kv_bytes_per_token
from aisim.scenario.presets import GPU_PROFILES, MODEL_FAMILIES

CASES = (("llama-3-8b", 1), ("llama-3-8b", 2), ("llama-3-8b", 4), ("llama-3-70b", 4))


def main() -> None:
    for gpu in ("H100-SXM", "A100-80GB"):
        for name, tp in CASES:
            arch = MODEL_FAMILIES[name]
            cost = CostModel(arch, GPU_PROFILES[gpu], calibration.efficiency(gpu)[0], tp, kv_bytes_per_token(arch, tp))
            one = cost.step_ns(1, 1, 512, 513) / 1e6
            batch = cost.step_ns(32, 32, 32 * 512, 32 * 513) / 1e6
            prefill = cost.step_ns(1, 512, 0, 512 * 513 / 2) / 1e6
            print(f"{gpu:10} {name:12} TP{tp}: decode b1 {one:7.3f} ms  b32 {batch:7.3f} ms  prefill 512 {prefill:7.3f} ms")


if __name__ == "__main__":
    main()
