"""The DCGM fields aisim exports, as dcgm-exporter's default counters CSV declares them: the list a
scenario's `telemetry.dcgm.fields` and its DCGM faults are checked against, and the one `aisim.telemetry`
samples and renders.

Names, DCGM field ids, Prometheus types and help texts are exact from dcgm-exporter
`etc/default-counters.csv` and DCGM `dcgm_fields.h` (NVIDIA/dcgm-exporter, NVIDIA/DCGM).
`DCGM_EXP_XID_ERRORS_COUNT` is commented out in that CSV; its help text here is the CSV's comment
line as remembered, not checked against the source (unverified). Field ids order the families
in an exposition, as the exporter's sorted template map does (`internal/pkg/rendermetrics/render_metrics.go`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PromType = Literal["gauge", "counter", "label"]
DcgmType = Literal["i", "d", "s"]
"""int64, double, string (the `fieldType` characters of `dcgmInjectFieldValue_t`)."""


@dataclass(frozen=True)
class DcgmField:
    """One DCGM field as the exporter exposes it."""

    name: str
    id: int
    prom_type: PromType
    help: str
    dcgm_type: DcgmType
    default: bool = True
    """On in dcgm-exporter's default counters CSV."""


def _f(name: str, field_id: int, prom_type: PromType, help_text: str, dcgm_type: DcgmType = "i",
       default: bool = True) -> DcgmField:
    return DcgmField(name, field_id, prom_type, help_text, dcgm_type, default)


CATALOGUE: tuple[DcgmField, ...] = (
    _f("DCGM_FI_DRIVER_VERSION", 1, "label", "Driver Version", "s"),
    _f("DCGM_FI_DEV_SM_CLOCK", 100, "gauge", "SM clock frequency (in MHz)."),
    _f("DCGM_FI_DEV_MEM_CLOCK", 101, "gauge", "Memory clock frequency (in MHz)."),
    _f("DCGM_FI_DEV_MEMORY_TEMP", 140, "gauge", "Memory temperature (in C)."),
    _f("DCGM_FI_DEV_GPU_TEMP", 150, "gauge", "GPU temperature (in C)."),
    _f("DCGM_FI_DEV_POWER_USAGE", 155, "gauge", "Power draw (in W).", "d"),
    _f("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 156, "counter", "Total energy consumption since boot (in mJ)."),
    _f("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 202, "counter", "Total number of PCIe retries."),
    _f("DCGM_FI_DEV_GPU_UTIL", 203, "gauge", "GPU utilization (in %)."),
    _f("DCGM_FI_DEV_MEM_COPY_UTIL", 204, "gauge", "Memory utilization (in %)."),
    _f("DCGM_FI_DEV_ENC_UTIL", 206, "gauge", "Encoder utilization (in %)."),
    _f("DCGM_FI_DEV_DEC_UTIL", 207, "gauge", "Decoder utilization (in %)."),
    _f("DCGM_FI_DEV_XID_ERRORS", 230, "gauge", "Value of the last XID error encountered."),
    _f("DCGM_FI_DEV_FB_FREE", 251, "gauge", "Framebuffer memory free (in MiB)."),
    _f("DCGM_FI_DEV_FB_USED", 252, "gauge", "Framebuffer memory used (in MiB)."),
    _f("DCGM_FI_DEV_FB_RESERVED", 253, "gauge", "Framebuffer memory reserved (in MiB)."),
    _f("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 393, "counter", "Number of remapped rows for uncorrectable errors"),
    _f("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 394, "counter", "Number of remapped rows for correctable errors"),
    _f("DCGM_FI_DEV_ROW_REMAP_FAILURE", 395, "gauge", "Whether remapping of rows has failed"),
    _f("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 449, "counter", "Total number of NVLink bandwidth counters for all lanes."),
    _f("DCGM_FI_DEV_VGPU_LICENSE_STATUS", 526, "gauge", "vGPU License status"),
    _f("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1001, "gauge", "Ratio of time the graphics engine is active.", "d"),
    _f("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1004, "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", "d"),
    _f("DCGM_FI_PROF_DRAM_ACTIVE", 1005, "gauge",
       "Ratio of cycles the device memory interface is active sending or receiving data.", "d"),
    _f("DCGM_FI_PROF_PCIE_TX_BYTES", 1009, "gauge",
       "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes "
       "per second."),
    _f("DCGM_FI_PROF_PCIE_RX_BYTES", 1010, "gauge",
       "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes "
       "per second."),
    _f("DCGM_EXP_XID_ERRORS_COUNT", 9001, "gauge",  # exporter-computed: no DCGM id, listed after the DCGM fields
       "Count of XID Errors within user-specified time window (see xid-count-window-size param).", default=False),
)
"""Every field aisim knows, in exposition order (field id)."""

FIELDS: dict[str, DcgmField] = {f.name: f for f in CATALOGUE}
BY_ID: dict[int, DcgmField] = {f.id: f for f in CATALOGUE}
DEFAULT_FIELDS: tuple[str, ...] = tuple(f.name for f in CATALOGUE if f.default)
"""dcgm-exporter's default counters (with the driver-version label field)."""
