"""Built-in GPU hardware profiles and model families.

GPU figures are peaks from the vendors' datasheets (dense tensor FLOP/s,
decimal GB and TB/s); B300, GB200, GB300 and RTX PRO 6000 come from AIConfigurator's system files (cited
where they are defined). B200 and H200 agree with those files on FLOP/s, power and NVLink; AIConfigurator
gives B200 7.7 TB/s (the datasheet's 8 TB/s is kept: the sources disagree) and PCIe Gen6 (kept at Gen5, the
HGX board's link), and both files give nominal memory sizes (180 GiB, 141 GiB) where the capacity here is
torch's measured 178.35 GiB (B200) or the nominal GB x 0.989 (H200). `capacity` is the total memory that software reports (`torch.cuda`,
vLLM logs), which is what a pool can hand out: measured values where published ones exist
(80 GB cards 79.1 GiB, L4 22.04 GiB, RTX 4090 23.65 GiB, T4 14.75 GiB, B200 178.35 GiB), and
otherwise the nominal size in GiB times 0.989, the ratio seen on 80 GB cards (approximate,
marked in `capacity_source`). Efficiency haircuts are not here: they belong to the cost model.

Model families are the Hugging Face configs of the named checkpoints, shipped in `configs/` (read by
`hfconfig.read_config`, as a scenario's `models[].config` is), and three hand-written non-decoder families.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .architecture import DTYPE_BYTES, DType, ModelFamily, Task
from .hfconfig import read_config

GIB = 2**30
GB = 10**9
TB = 10**12
TFLOPS = 10**12

CONFIGS = Path(__file__).parent / "configs"
"""Hugging Face configs of the built-in families."""
__all__ = ["DTYPE_BYTES", "GPU_PROFILES", "MODEL_FAMILIES", "DType", "GpuProfile", "ModelFamily", "Task"]

PCIE_PER_DIRECTION = {3: 15_750_000_000, 4: 32 * GB, 5: 64 * GB, 6: 128 * GB}
"""Theoretical x16 bandwidth per direction, by PCIe generation."""


@dataclass(frozen=True)
class GpuProfile:
    """Hardware numbers of one GPU model."""

    name: str
    memory: int
    """Datasheet memory in bytes (decimal GB)."""
    capacity: int
    """Total memory in bytes as software reports it; what the memory pool manages."""
    memory_bandwidth: int
    """HBM / GDDR bandwidth, bytes per second (datasheet)."""
    fp16_flops: int
    """Dense BF16/FP16 tensor FLOP/s (datasheet)."""
    fp8_flops: int | None
    """Dense FP8 tensor FLOP/s, None when the GPU has no FP8 tensor cores."""
    pcie_generation: int
    interconnect_bandwidth: int | None
    """NVLink / fabric total bidirectional bandwidth per GPU, bytes per second; None without one."""
    tdp_mw: int
    sms: int
    compute_capability: str
    vendor: Literal["nvidia", "amd"] = "nvidia"
    launch_latency_ns: int = 4_000
    """Host cost of one kernel launch (published measurements, 3.0 us for a raw `cuLaunchKernel` in
    meta-pytorch/tritonbench PR 1017 and 2.65 us for an enqueue in ahrefs/ocannl issue 488: 2.5-5 us raw CUDA)."""
    greatest_stream_priority: int = -5
    """Highest stream priority the device offers (CUDA range 0..-5 on Turing and later)."""
    capacity_source: str = "measured"
    fp4_flops: int | None = None
    """Dense FP4 (NVFP4) tensor FLOP/s on Blackwell; None without FP4 tensor cores (or not given)."""

    @property
    def host_link_bandwidth(self) -> int:
        """PCIe x16 bandwidth per direction, bytes per second."""
        return PCIE_PER_DIRECTION[self.pcie_generation]


def approximate_capacity(memory: int) -> int:
    """Reported capacity of a card with `memory` datasheet bytes: nominal GiB x 0.989 (80 GB -> 79.1 GiB)."""
    return int(memory / GB * 0.989 * GIB)


def _profile(name: str, memory_gb: float, capacity: int | None, bw_tb: float, fp16_tf: float,
             fp8_tf: float | None, pcie: int, link_gb: float | None, tdp_w: int, sms: int, cc: str,
             capacity_source: str | None = None, **extra: object) -> GpuProfile:
    return GpuProfile(
        name=name,
        memory=int(memory_gb * GB),
        capacity=capacity if capacity is not None else approximate_capacity(int(memory_gb * GB)),
        memory_bandwidth=int(bw_tb * TB),
        fp16_flops=int(fp16_tf * TFLOPS),
        fp8_flops=None if fp8_tf is None else int(fp8_tf * TFLOPS),
        pcie_generation=pcie,
        interconnect_bandwidth=None if link_gb is None else int(link_gb * GB),
        tdp_mw=tdp_w * 1000,
        sms=sms,
        compute_capability=cc,
        capacity_source=capacity_source or ("measured" if capacity is not None else "approximate (nominal GiB x 0.989)"),
        **extra,  # type: ignore[arg-type]
    )


_GIB_80 = int(79.1 * GIB)

GPU_PROFILES: dict[str, GpuProfile] = {
    p.name: p
    for p in (
        _profile("A100-40GB", 40, int(39.39 * GIB), 1.555, 312, None, 4, 600, 400, 108, "8.0"),
        _profile("A100-80GB", 80, _GIB_80, 2.039, 312, None, 4, 600, 400, 108, "8.0"),
        _profile("A100-80GB-PCIe", 80, _GIB_80, 1.935, 312, None, 4, 600, 300, 108, "8.0"),
        _profile("H100-SXM", 80, _GIB_80, 3.35, 989, 1979, 5, 900, 700, 132, "9.0"),
        _profile("H100-PCIe", 80, _GIB_80, 2.0, 756, 1513, 5, 600, 350, 114, "9.0"),
        _profile("H100-NVL", 94, None, 3.9, 835, 1671, 5, 600, 400, 132, "9.0"),
        _profile("H200", 141, None, 4.8, 989, 1979, 5, 900, 700, 132, "9.0"),
        _profile("H200-NVL", 141, None, 4.8, 835, 1671, 5, 900, 600, 132, "9.0"),
        _profile("B200", 180, int(178.35 * GIB), 8.0, 2250, 4500, 5, 1800, 1000, 148, "10.0", fp4_flops=9000 * TFLOPS),
        # Blackwell systems of AIConfigurator (ai-dynamo/aiconfigurator
        # `aic-core/src/aiconfigurator_core/systems/*.yaml` at 095f58a51, Apache-2.0): capacity is the nvidia-smi total
        # those files record; FLOP/s dense; NVLink both directions (2 x `intra_node_bw`). B300 (`b300_sxm.yaml`,
        # Blackwell Ultra datasheet): 275,040 MiB, 7.75 TB/s (62 TB/s / 8), 2.25 PF BF16, 4.5 PF FP8, 14 PF FP4, 1,100
        # W, PCIe Gen6, sm_103; 160 SMs (Blackwell Ultra, inferred: not in the file).
        _profile("B300", 288, 275_040 * 2**20, 7.75, 2250, 4500, 6, 1800, 1100, 160, "10.3", fp4_flops=14000 * TFLOPS,
                 capacity_source="measured (nvidia-smi, AIConfigurator b300_sxm.yaml)"),
        # GB200 (`gb200.yaml`, Blackwell datasheet): 189,471 MiB, 8 TB/s, 2.5 PF BF16, 5 PF FP8, 10 PF FP4, 1,200 W,
        # PCIe Gen5 to Grace, NVLink 5 in the NVL72 rack, sm_100; 148 SMs as B200 (inferred).
        _profile("GB200", 186, 189_471 * 2**20, 8.0, 2500, 5000, 5, 1800, 1200, 148, "10.0", fp4_flops=10000 * TFLOPS,
                 capacity_source="measured (nvidia-smi, AIConfigurator gb200.yaml)"),
        # GB300 (`gb300.yaml`, Blackwell Ultra datasheet): 284,208 MiB, 8 TB/s, 2.5 PF BF16, 5 PF FP8, 15 PF FP4,
        # 1,400 W, PCIe Gen5, sm_103; 160 SMs (inferred).
        _profile("GB300", 288, 284_208 * 2**20, 8.0, 2500, 5000, 5, 1800, 1400, 160, "10.3", fp4_flops=15000 * TFLOPS,
                 capacity_source="measured (nvidia-smi, AIConfigurator gb300.yaml)"),
        # RTX PRO 6000 Blackwell Server Edition (`rtx_pro_6000_server.yaml`): 97,887 MiB of GDDR7, 1.792 TB/s,
        # 467.8 TF BF16 / 935.6 FP8 / 1,871 FP4 dense (the file's figures, scaled to the 2,430 MHz clock it
        # observed), 600 W, PCIe Gen5 and no NVLink, compute capability 12.0; 188 SMs (24,064 CUDA cores / 128).
        _profile("RTX-PRO-6000", 96, 97_887 * 2**20, 1.792, 467.8, 935.6, 5, None, 600, 188, "12.0",
                 fp4_flops=int(1871.2 * TFLOPS), capacity_source="measured (nvidia-smi, AIConfigurator "
                                                               "rtx_pro_6000_server.yaml)"),
        _profile("L4", 24, int(22.04 * GIB), 0.300, 121, 242, 4, None, 72, 58, "8.9"),
        _profile("L40S", 48, None, 0.864, 362, 733, 4, None, 350, 142, "8.9"),
        _profile("A10", 24, None, 0.600, 125, None, 4, None, 150, 72, "8.6"),
        _profile("A10G", 24, None, 0.600, 70, None, 4, None, 300, 80, "8.6"),
        _profile("T4", 16, int(14.75 * GIB), 0.320, 65, None, 3, None, 70, 40, "7.5"),
        _profile("RTX-4090", 24, int(23.65 * GIB), 1.008, 165, 330, 4, None, 450, 128, "8.9"),
        _profile("MI300X", 192, None, 5.3, 1307, 2615, 5, 896, 750, 304, "gfx942", vendor="amd"),
    )
}


FAMILY_CONFIGS: dict[str, str] = {
    "llama-2-7b": "meta-llama--Llama-2-7b-hf",
    "llama-3-8b": "meta-llama--Meta-Llama-3-8B",
    "llama-2-70b": "meta-llama--Llama-2-70b-hf",
    "codellama-34b": "codellama--CodeLlama-34b-Instruct-hf",
    "llama-3-70b": "meta-llama--Meta-Llama-3-70B",
    "mistral-7b": "mistralai--Mistral-7B-v0.1",
    "qwen2-7b": "Qwen--Qwen2-7B",
    "mixtral-8x7b": "mistralai--Mixtral-8x7B-v0.1",
    "mixtral-8x22b": "mistralai--Mixtral-8x22B-v0.1",
    "llama-3.1-8b": "meta-llama--Meta-Llama-3.1-8B",
    "llama-3.1-70b": "meta-llama--Meta-Llama-3.1-70B",
    "llama-3.1-70b-fp8": "nvidia--Llama-3.1-70B-Instruct-FP8",
    "llama-3.1-70b-nvfp4": "nvidia--Llama-3.1-70B-Instruct-FP4",
    "llama-3.1-405b": "meta-llama--Meta-Llama-3.1-405B",
    "llama-4-scout": "meta-llama--Llama-4-Scout-17B-16E-Instruct",
    "qwen3-8b": "Qwen--Qwen3-8B",
    "qwen3-32b": "Qwen--Qwen3-32B",
    "qwen3-32b-fp8": "Qwen--Qwen3-32B-FP8",
    "qwen3-30b-a3b": "Qwen--Qwen3-30B-A3B",
    "qwen3-30b-a3b-fp8": "Qwen--Qwen3-30B-A3B-FP8",
    "qwen3-235b-a22b": "Qwen--Qwen3-235B-A22B",
    "qwen3-235b-a22b-fp8": "Qwen--Qwen3-235B-A22B-FP8",
    "deepseek-v3": "deepseek-ai--DeepSeek-V3",
    "deepseek-r1": "deepseek-ai--DeepSeek-R1",
    "kimi-k2": "moonshotai--Kimi-K2-Instruct",
    "kimi-k2.5": "moonshotai--Kimi-K2.5",
    "kimi-k2.5-nvfp4": "nvidia--Kimi-K2.5-NVFP4",
    "minimax-m2.5": "MiniMaxAI--MiniMax-M2.5",
    "minimax-m2.5-nvfp4": "nvidia--MiniMax-M2.5-NVFP4",
    "gpt-oss-20b": "openai--gpt-oss-20b",
    "gpt-oss-120b": "openai--gpt-oss-120b",
}
"""Families read from the Hugging Face configs shipped in `configs/` (`<id>_config.json`, `/` written `--`): the
newer ones copied unchanged from AIConfigurator's model configs (Apache-2.0, `configs/README.md`); those of the
first families written from their published configs with the numbers aisim had (`torch_dtype` bfloat16)."""


def family_config(name: str) -> Path | None:
    """The shipped config file of a family, or None for a hand-written one."""
    stem = FAMILY_CONFIGS.get(name)
    return CONFIGS / f"{stem}_config.json" if stem else None


def _family(name: str) -> ModelFamily:
    path = family_config(name)
    assert path is not None
    return dataclasses.replace(read_config(path, name=name), huggingface_id=FAMILY_CONFIGS[name].replace("--", "/"),
                               source="")


MODEL_FAMILIES: dict[str, ModelFamily] = {name: _family(name) for name in FAMILY_CONFIGS}
MODEL_FAMILIES.update({
    f.name: f
    for f in (
        ModelFamily("bge-large-en", "embed", 335_141_888, 24, 1024, 16, 16, 64, 4096, 30522, 512,
                    dtype="fp16", huggingface_id="BAAI/bge-large-en-v1.5"),
        ModelFamily("all-minilm-l6-v2", "embed", 22_713_216, 6, 384, 12, 12, 32, 1536, 30522, 512,
                    dtype="fp32", huggingface_id="sentence-transformers/all-MiniLM-L6-v2"),
        ModelFamily("resnet-50", "classify", 25_557_032, 50, 2048, 0, 0, 0, 0, 1000, 0, dtype="fp32",
                    flops_per_sample=8_200_000_000, default_runtime="onnxruntime",
                    huggingface_id="microsoft/resnet-50"),
    )
})
"""ResNet-50: 25.6 M parameters, about 4.1 GMAC (8.2 GFLOP) per 224x224 image; `vocab` is its 1,000 classes.
The encoders (BERT) and the CNN are hand-written: vLLM does not read them as decoder configs."""
