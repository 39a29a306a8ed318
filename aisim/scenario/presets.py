"""Built-in GPU hardware profiles and model families.

GPU figures are datasheet peaks from `shared/reference/gpu-profiles.md` (dense tensor FLOP/s,
decimal GB and TB/s). `capacity` is the total memory that software reports (`torch.cuda`,
vLLM logs), which is what a pool can hand out: measured values where the reference gives them
(80 GB cards 79.1 GiB, L4 22.04 GiB, RTX 4090 23.65 GiB, T4 14.75 GiB, B200 178.35 GiB), and
otherwise the nominal size in GiB times 0.989, the ratio seen on 80 GB cards (approximate,
marked in `capacity_source`). Efficiency haircuts are not here: they belong to the cost model.

Model families carry the Hugging Face config numbers of the named checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

GIB = 2**30
GB = 10**9
TB = 10**12
TFLOPS = 10**12

Task = Literal["generate", "embed", "classify"]
DType = Literal["fp32", "fp16", "bf16", "fp8", "int8", "int4"]
DTYPE_BYTES: dict[str, float] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5}

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
    """Host cost of one kernel launch (`gpu-memory-and-streams.md` §5.4: 2.5-5 us raw CUDA)."""
    greatest_stream_priority: int = -5
    """Highest stream priority the device offers (CUDA range 0..-5 on Turing and later)."""
    capacity_source: str = "measured"

    @property
    def host_link_bandwidth(self) -> int:
        """PCIe x16 bandwidth per direction, bytes per second."""
        return PCIE_PER_DIRECTION[self.pcie_generation]


def approximate_capacity(memory: int) -> int:
    """Reported capacity of a card with `memory` datasheet bytes: nominal GiB x 0.989 (80 GB -> 79.1 GiB)."""
    return int(memory / GB * 0.989 * GIB)


def _profile(name: str, memory_gb: float, capacity: int | None, bw_tb: float, fp16_tf: float,
             fp8_tf: float | None, pcie: int, link_gb: float | None, tdp_w: int, sms: int, cc: str,
             **extra: object) -> GpuProfile:
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
        capacity_source="measured" if capacity is not None else "approximate (nominal GiB x 0.989)",
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
        _profile("B200", 180, int(178.35 * GIB), 8.0, 2250, 4500, 5, 1800, 1000, 148, "10.0"),
        _profile("L4", 24, int(22.04 * GIB), 0.300, 121, 242, 4, None, 72, 58, "8.9"),
        _profile("L40S", 48, None, 0.864, 362, 733, 4, None, 350, 142, "8.9"),
        _profile("A10", 24, None, 0.600, 125, None, 4, None, 150, 72, "8.6"),
        _profile("A10G", 24, None, 0.600, 70, None, 4, None, 300, 80, "8.6"),
        _profile("T4", 16, int(14.75 * GIB), 0.320, 65, None, 3, None, 70, 40, "7.5"),
        _profile("RTX-4090", 24, int(23.65 * GIB), 1.008, 165, 330, 4, None, 450, 128, "8.9"),
        _profile("MI300X", 192, None, 5.3, 1307, 2615, 5, 896, 750, 304, "gfx942", vendor="amd"),
    )
}


@dataclass(frozen=True)
class ModelFamily:
    """Architecture numbers of a model family (Hugging Face `config.json` of the checkpoint)."""

    name: str
    task: Task
    params: int
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_position: int
    dtype: DType = "bf16"
    experts: int = 1
    experts_per_token: int = 1
    active_params: int | None = None
    """Parameters touched per token (MoE); equals `params` for dense models."""
    flops_per_sample: int | None = None
    """Forward FLOPs per input sample for non-token models (CNNs)."""
    default_runtime: Literal["vllm", "tensorrt", "onnxruntime", "python"] = "vllm"
    huggingface_id: str = ""


MODEL_FAMILIES: dict[str, ModelFamily] = {
    f.name: f
    for f in (
        ModelFamily("llama-2-7b", "generate", 6_738_415_616, 32, 4096, 32, 32, 128, 11008, 32000, 4096,
                    huggingface_id="meta-llama/Llama-2-7b-hf"),
        ModelFamily("llama-3-8b", "generate", 8_030_261_248, 32, 4096, 32, 8, 128, 14336, 128256, 8192,
                    huggingface_id="meta-llama/Meta-Llama-3-8B"),
        ModelFamily("llama-2-70b", "generate", 68_976_648_192, 80, 8192, 64, 8, 128, 28672, 32000, 4096,
                    huggingface_id="meta-llama/Llama-2-70b-hf"),
        ModelFamily("codellama-34b", "generate", 33_743_970_304, 48, 8192, 64, 8, 128, 22016, 32000, 16384,
                    huggingface_id="codellama/CodeLlama-34b-Instruct-hf"),
        ModelFamily("llama-3-70b", "generate", 70_553_706_496, 80, 8192, 64, 8, 128, 28672, 128256, 8192,
                    huggingface_id="meta-llama/Meta-Llama-3-70B"),
        ModelFamily("mistral-7b", "generate", 7_241_732_096, 32, 4096, 32, 8, 128, 14336, 32000, 32768,
                    huggingface_id="mistralai/Mistral-7B-v0.1"),
        ModelFamily("qwen2-7b", "generate", 7_615_616_512, 28, 3584, 28, 4, 128, 18944, 152064, 32768,
                    huggingface_id="Qwen/Qwen2-7B"),
        ModelFamily("mixtral-8x7b", "generate", 46_702_792_704, 32, 4096, 32, 8, 128, 14336, 32000, 32768,
                    experts=8, experts_per_token=2, active_params=12_879_921_152,
                    huggingface_id="mistralai/Mixtral-8x7B-v0.1"),
        ModelFamily("bge-large-en", "embed", 335_141_888, 24, 1024, 16, 16, 64, 4096, 30522, 512,
                    dtype="fp16", huggingface_id="BAAI/bge-large-en-v1.5"),
        ModelFamily("all-minilm-l6-v2", "embed", 22_713_216, 6, 384, 12, 12, 32, 1536, 30522, 512,
                    dtype="fp32", huggingface_id="sentence-transformers/all-MiniLM-L6-v2"),
        ModelFamily("resnet-50", "classify", 25_557_032, 50, 2048, 0, 0, 0, 0, 1000, 0, dtype="fp32",
                    flops_per_sample=8_200_000_000, default_runtime="onnxruntime",
                    huggingface_id="microsoft/resnet-50"),
    )
}
"""ResNet-50: 25.6 M parameters, about 4.1 GMAC (8.2 GFLOP) per 224x224 image; `vocab` is its 1,000 classes."""
