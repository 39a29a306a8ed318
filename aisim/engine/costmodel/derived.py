"""GPUs without operator profiles: their constants from the nearest profiled GPU through ratios.

Only two GPUs were profiled (Vidur: H100-SXM, A100-80GB). Every other preset takes a base
profiled GPU's operator curves with

- memory-bound terms (GEMM operand traffic, element-wise kernels, KV reads) divided by the ratio of
  *achieved* memory bandwidth,
- compute-bound terms (GEMM and attention FLOPs) divided by the ratio of *achieved* tensor
  throughput,
- all-reduce sizes scaled by the ratio of link bandwidth (`collectives.AllReduce.scaled`),
- kernel floors and the engine's CPU overheads unchanged (no measurement: an assumption).

Where a public microbenchmark measured the achieved figure, the ratio uses it; otherwise it is the
datasheet ratio (`shared/reference/gpu-profiles.md`), which assumes the same achieved share of peak
as the base GPU. `uncertainty` is the relative error band the report prints for the GPU's step
times: the profiled GPUs' own out-of-sample error for measured constants, wider for ratios
(datasheet ratios of the same vendor and software stack), widest across vendors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Topology = Literal["nvswitch", "pairwise", "pcie"]


@dataclass(frozen=True)
class Derivation:
    """How one GPU's constants follow from a profiled GPU's."""

    base: str
    """The profiled GPU (a key of `calibrated.json` `operators`)."""
    memory: float
    """Achieved memory bandwidth over the base GPU's."""
    compute: float
    """Achieved BF16 tensor throughput over the base GPU's."""
    link: float
    """GPU-to-GPU link bandwidth over the base GPU's (NVLink, fabric or PCIe)."""
    topology: Topology
    host: str
    """The GPU whose fitted CPU overheads (Argonne rows) it shares: the same host software stack."""
    uncertainty: float
    source: str


H100_ACHIEVED_HBM = 0.88 * 3.35e12
"""H100-SXM HBM copy bandwidth: 87-89 % of 3.35 TB/s (`shared/reference/gpu-memory-and-streams.md` §5.5)."""
H100_ACHIEVED_BF16 = 0.93 * 989e12
"""H100 BF16 GEMM: up to 93 % of its dense peak (Ambati et al., "AMD MI300X GPU Performance Analysis",
arXiv 2510.27583, 2025, the same study as the MI300X figures below)."""
MI300X_ACHIEVED_HBM = 0.81 * 5.3e12
"""MI300X: 81 % of 5.3 TB/s in BabelStream-style tests (arXiv 2510.27583)."""
MI300X_ACHIEVED_BF16 = 0.45 * 1307e12
"""MI300X: about 45 % of its 1,307 TFLOP/s dense BF16 peak in GEMM tests (arXiv 2510.27583, which puts
its realised throughput at 37-66 % of the NVIDIA GPUs'); AMD's own "Measuring Max-Achievable FLOPs"
(rocm.blogs.amd.com, part 2) also reports sustained clocks well below the peak's."""

_DATASHEET = "datasheet ratios (shared/reference/gpu-profiles.md): same achieved share of peak as the base GPU"


def _nvidia(base: str, memory: float, compute: float, link: float, topology: Topology, host: str,
            uncertainty: float = 0.15) -> Derivation:
    return Derivation(base, memory, compute, link, topology, host, uncertainty, _DATASHEET)


A100_BW, H100_BW = 2.039, 3.35
DERIVED: dict[str, Derivation] = {
    "A100-40GB": _nvidia("A100-80GB", 1.555 / A100_BW, 1.0, 1.0, "nvswitch", "A100-40GB", 0.10),
    "A100-80GB-PCIe": _nvidia("A100-80GB", 1.935 / A100_BW, 1.0, 1.0, "pairwise", "A100-40GB"),
    "H100-PCIe": _nvidia("H100-SXM", 2.0 / H100_BW, 756 / 989, 600 / 900, "pairwise", "H100-SXM"),
    "H100-NVL": _nvidia("H100-SXM", 3.9 / H100_BW, 835 / 989, 600 / 900, "pairwise", "H100-SXM"),
    "H200": _nvidia("H100-SXM", 4.8 / H100_BW, 1.0, 1.0, "nvswitch", "H100-SXM"),
    "H200-NVL": _nvidia("H100-SXM", 4.8 / H100_BW, 835 / 989, 1.0, "pairwise", "H100-SXM"),
    "B200": _nvidia("H100-SXM", 8.0 / H100_BW, 2250 / 989, 1800 / 900, "nvswitch", "H100-SXM", 0.25),
    "B300": _nvidia("H100-SXM", 7.75 / H100_BW, 2250 / 989, 1800 / 900, "nvswitch", "H100-SXM", 0.25),
    "GB200": _nvidia("H100-SXM", 8.0 / H100_BW, 2500 / 989, 1800 / 900, "nvswitch", "H100-SXM", 0.25),
    "GB300": _nvidia("H100-SXM", 8.0 / H100_BW, 2500 / 989, 1800 / 900, "nvswitch", "H100-SXM", 0.25),
    "RTX-PRO-6000": _nvidia("A100-80GB", 1.792 / A100_BW, 467.8 / 312, 64 / 600, "pcie", "A100-40GB", 0.30),
    "L4": _nvidia("A100-80GB", 0.300 / A100_BW, 121 / 312, 64 / 600, "pcie", "A100-40GB", 0.25),
    "L40S": _nvidia("A100-80GB", 0.864 / A100_BW, 362 / 312, 64 / 600, "pcie", "A100-40GB", 0.25),
    "A10": _nvidia("A100-80GB", 0.600 / A100_BW, 125 / 312, 64 / 600, "pcie", "A100-40GB", 0.25),
    "A10G": _nvidia("A100-80GB", 0.600 / A100_BW, 70 / 312, 64 / 600, "pcie", "A100-40GB", 0.30),
    "T4": _nvidia("A100-80GB", 0.320 / A100_BW, 65 / 312, 31.5 / 600, "pcie", "A100-40GB", 0.30),
    "RTX-4090": _nvidia("A100-80GB", 1.008 / A100_BW, 165 / 312, 64 / 600, "pcie", "A100-40GB", 0.25),
    "MI300X": Derivation(
        "H100-SXM", MI300X_ACHIEVED_HBM / H100_ACHIEVED_HBM, MI300X_ACHIEVED_BF16 / H100_ACHIEVED_BF16,
        896 / 900, "nvswitch", "H100-SXM", 0.30,
        "measured microbenchmarks (arXiv 2510.27583): HBM 81 % of 5.3 TB/s vs H100 88 % of 3.35 TB/s; "
        "BF16 GEMM 45 % of 1,307 TFLOP/s vs H100 93 % of 989; Infinity Fabric 7 x 128 GB/s as a fully linked "
        "node (ratio to NVSwitch NVLink 900 GB/s); ROCm kernel floors and vLLM CPU overheads assumed equal to "
        "the H100's (not measured)"),
}
"""Every preset without Vidur profiles. A GPU missing here (a user's own profile) takes the base
with the closest datasheet bandwidth, by datasheet ratios (`calibration.derivation`)."""


@dataclass(frozen=True)
class Profiled:
    """A GPU with Vidur operator profiles: what the profiles lack."""

    host: str
    """The GPU whose Argonne rows give its CPU overheads and decode-attention bandwidth share."""
    attention_share: float
    """Prefill attention throughput as a share of the dense BF16 peak: published FlashAttention
    forward-pass microbenchmarks at head dim 128, causal (A100: FlashAttention-2 reaches 50-73 % of
    peak, Dao, arXiv 2307.08691; H100: FlashAttention-3 reaches 50-75 % and FlashAttention-2 35-40 %,
    Shah et al., arXiv 2407.08608), taken at the low end for the short chunks of chunked prefill."""
    topology: Topology = "nvswitch"


PROFILED: dict[str, Profiled] = {
    "H100-SXM": Profiled("H100-SXM", 0.50),
    "A100-80GB": Profiled("A100-40GB", 0.60),
}
