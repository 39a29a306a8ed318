"""Which tables price which GPU: aisim's GPU presets, the measured systems, and the rule for the others.

A preset with tables is priced from them (`MEASURED`). A GPU without (`SCALED`, or a scenario's own
`hardware:` block) takes the nearest measured system's tables through `ScaledTables`: each kernel keeps its
fixed cost and scales the rest by the ratio of speeds of light, memory-bound shapes by memory bandwidth,
compute-bound ones by tensor throughput, collectives by link bandwidth. Its datasheet numbers come from the
preset (`scenario/presets.py`), except where a microbenchmark measured what the GPU achieves
(`costmodel/derived.py`: MI300X). `uncertainty` is the relative error band a report prints, from
`bench/kernel_fidelity.py` (measured GPUs: the held-back table rows; scaled: a measured GPU priced as if it
had no tables).
"""

from __future__ import annotations

from functools import cache

from ....scenario.presets import GPU_PROFILES, GpuProfile
from ..derived import DERIVED
from .roofline import Spec
from .tables import (
    ARCHITECTURE,
    KernelTables,
    ScaledTables,
    manifest,
    system_spec,
)

MEASURED = {"H100-SXM": "h100_sxm", "H200": "h200_sxm", "B200": "b200_sxm", "B300": "b300_sxm", "GB200": "gb200",
            "GB300": "gb300", "A100-80GB": "a100_sxm", "L40S": "l40s", "RTX-PRO-6000": "rtx_pro_6000_server"}
"""aisim GPU presets priced by their own system's tables."""
SCALED = {"A100-40GB": "a100_sxm", "A100-80GB-PCIe": "a100_sxm", "H100-PCIe": "h100_sxm", "H100-NVL": "h100_sxm",
          "H200-NVL": "h200_sxm", "L4": "l40s", "RTX-4090": "l40s", "A10": "l40s", "A10G": "l40s", "T4": "l40s",
          "MI300X": "h100_sxm"}
"""aisim GPU presets without tables -> the system they are scaled from: the same chip or architecture where
one was measured (A100 for the other A100s, H100 and H200 for their PCIe and NVL cards, Ada's L40S for L4
and RTX 4090); for the A10s and T4, power-limited GDDR6 PCIe cards like the L40S, the L40S too: datasheet
ratios from an HBM card overstate such a card by half (L40S priced from A100's tables: +50 % signed median,
`bench/kernel_fidelity.py --part gpu`). MI300X is priced from H100 through measured achieved bandwidth and
throughput."""
FAMILY = {75: "Turing", 80: "Ampere", 86: "Ampere", 87: "Ampere", 89: "Ada", 90: "Hopper", 100: "Blackwell",
          103: "Blackwell", 120: "Blackwell RTX"}

UNCERTAINTY_MEASURED = 0.05
"""Held-back rows of a GPU's own tables: 2.7 % median error between grid points, 3.9 % beyond the largest
measured size, 7.3 % for a held-back shape (an attention head layout, an MoE model) from its neighbours."""
UNCERTAINTY_SAME_ARCHITECTURE = 0.15
"""A measured GPU priced from a sibling's tables: median error 5-6 % (B300, GB200 and GB300 from B200 and
B300), 9-11 % (H100 and H200 from each other)."""
UNCERTAINTY_OTHER_ARCHITECTURE = 0.40
"""Across architectures: 21-22 % (B200 from H200, RTX PRO 6000 from L40S), 42-54 % (L40S and A100 from each
other)."""
UNCERTAINTY_OTHER_VENDOR = 0.50


def gpu_spec(gpu: GpuProfile) -> Spec:
    """A preset's datasheet numbers; for a GPU whose achieved bandwidth and throughput were measured against
    its base (`derived.py`, MI300X), the base system's numbers times those measured ratios."""
    derivation = DERIVED.get(gpu.name)
    base_name = SCALED.get(gpu.name)
    if derivation is not None and derivation.base == "H100-SXM" and base_name == "h100_sxm" and gpu.vendor != "nvidia":
        base = system_spec(base_name)
        flops = {k: v * derivation.compute for k, v in base.flops.items() if k != "fp4"}
        return Spec(gpu.name, base.bandwidth * derivation.memory, flops, base.link * derivation.link,
                    base.gpus_per_node, base.scale_out)
    flops = {"bf16": float(gpu.fp16_flops)}
    if gpu.fp8_flops:
        flops["fp8"] = float(gpu.fp8_flops)
        fp4 = getattr(gpu, "fp4_flops", None)
        if fp4:
            flops["fp4"] = float(fp4)
    link = gpu.interconnect_bandwidth / 2 if gpu.interconnect_bandwidth else gpu.host_link_bandwidth
    return Spec(gpu.name, float(gpu.memory_bandwidth), flops, float(link))


def base_system(gpu: GpuProfile) -> str:
    """The measured system a GPU without tables is scaled from: its preset's (`SCALED`), else the measured
    system of the nearest compute capability (AMD: H100), then the nearest memory bandwidth."""
    if gpu.name in SCALED:
        return SCALED[gpu.name]
    if gpu.vendor != "nvidia":
        return "h100_sxm"
    arch = _capability(gpu) or 90
    return min(ARCHITECTURE, key=lambda s: (abs(ARCHITECTURE[s] - arch),
                                            abs(system_spec(s).bandwidth / gpu.memory_bandwidth - 1)))


def uncertainty(gpu: GpuProfile) -> float:
    """The relative error band of a GPU's kernel times (see the module docstring)."""
    if gpu.name in MEASURED:
        return UNCERTAINTY_MEASURED
    if gpu.vendor != "nvidia":
        return UNCERTAINTY_OTHER_VENDOR
    family = FAMILY.get(_capability(gpu))
    same = family is not None and family == FAMILY.get(ARCHITECTURE[base_system(gpu)])
    return UNCERTAINTY_SAME_ARCHITECTURE if same else UNCERTAINTY_OTHER_ARCHITECTURE


def _capability(gpu: GpuProfile) -> int:
    """Compute capability x 10 (90 for "9.0"); 0 when the profile does not give one NVIDIA-style."""
    try:
        major, minor = (int(x) for x in gpu.compute_capability.split(".")[:2])
    except ValueError:
        return 0
    return major * 10 + minor


@cache
def _scaled(gpu: GpuProfile) -> KernelTables:
    return ScaledTables(KernelTables.for_system(base_system(gpu)), gpu_spec(gpu), gpu.name)


def for_gpu(gpu: GpuProfile | str) -> KernelTables:
    """The kernel tables that price a GPU: its own system's, or the nearest system's scaled to it."""
    profile = GPU_PROFILES[gpu] if isinstance(gpu, str) else gpu
    system = MEASURED.get(profile.name)
    if system is not None:
        return KernelTables.for_system(system)
    return _scaled(profile)


COVERAGE = {"gemm": ("dtype", ("bfloat16", "fp8", "fp8_block", "nvfp4")),
            "context_attention": ("kv_dtype", ("bfloat16", "fp8")),
            "generation_attention": ("kv_dtype", ("bfloat16", "fp8")),
            "mla_context": ("gemm_dtype", ("bfloat16", "fp8_block", "nvfp4")),
            "mla_generation": ("gemm_dtype", ("bfloat16", "fp8_block", "nvfp4")),
            "mla_bmm": ("dtype", ("bfloat16",)),
            "moe": ("dtype", ("bfloat16", "fp8", "fp8_block", "nvfp4", "int4_wo", "w4a16_mxfp4", "w4a8_mxfp4_mxfp8")),
            "allreduce": ("mode", ("graph", "eager")),
            "quantize": ("dtype", ("fp8",))}
"""The coverage matrix's rows: each table by the name that selects its kernels."""


def coverage(tables: KernelTables) -> dict[tuple[str, str], str]:
    """(table, name) -> "measured", "scaled from <system>" or "missing", for one GPU's tables."""
    return {(name, value): tables.source_of(name, **{key: value})
            for name, (key, values) in COVERAGE.items() for value in values}


def manifest_text() -> str:
    """The packaged tables' provenance: per system and table, the vLLM version and row counts."""
    document = manifest()
    source = document["source"]
    lines = [f"AIConfigurator vLLM kernel tables ({source['repository']} @ {source['commit']}, Apache-2.0)",
             f"{'system':20s} {'table':21s} {'vLLM':8s} {'rows':>7s} {'measured':>8s} {'dup':>5s} {'slices':>6s}"]
    for system, info in document["systems"].items():
        for name, table in info["tables"].items():
            lines.append(f"{system:20s} {name:21s} {table['version']:8s} {table['rows']:7d} {table['measured']:8d} "
                         f"{table['duplicates']:5d} {table['slices']:6d}")
    return "\n".join(lines)
