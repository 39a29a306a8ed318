"""What one GPU has done since the run started, in the units telemetry turns into DCGM fields.

Everything is cumulative from t = 0, so a sampler reads the device at two instants and divides the
difference by the interval: that is how NVML and DCGM define their utilisations ("percent of time
over the past sample period during which ...").

- `busy_ns`: time with at least one kernel running (`DCGM_FI_DEV_GPU_UTIL`);
- `tensor_ns`: the FLOPs done, as time at the datasheet tensor peak (`DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`);
- `dram_ns`: the bytes read and written in device memory, as time at the datasheet bandwidth
  (`DCGM_FI_PROF_DRAM_ACTIVE`, `DCGM_FI_DEV_MEM_COPY_UTIL`);
- `h2d_bytes` / `d2h_bytes`: bytes over PCIe to and from the device (`DCGM_FI_PROF_PCIE_RX_BYTES` /
  `_TX_BYTES`);
- `nvlink_bytes`: tensor-parallel all-reduce traffic (`DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Activity:
    """Cumulative work of one GPU (see the module docstring)."""

    busy_ns: float = 0.0
    tensor_ns: float = 0.0
    dram_ns: float = 0.0
    h2d_bytes: float = 0.0
    d2h_bytes: float = 0.0
    nvlink_bytes: float = 0.0

    def add(self, other: Activity) -> None:
        self.busy_ns += other.busy_ns
        self.tensor_ns += other.tensor_ns
        self.dram_ns += other.dram_ns
        self.h2d_bytes += other.h2d_bytes
        self.d2h_bytes += other.d2h_bytes
        self.nvlink_bytes += other.nvlink_bytes

    def copy(self) -> Activity:
        return Activity(self.busy_ns, self.tensor_ns, self.dram_ns, self.h2d_bytes, self.d2h_bytes, self.nvlink_bytes)
