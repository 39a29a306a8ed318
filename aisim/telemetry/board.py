"""One simulated GPU as dcgm-exporter sees it: its identity labels and its telemetry state.

Identity (dcgm-exporter's labels, NVIDIA/dcgm-exporter `internal/pkg/rendermetrics/render_metrics.go`;
run-ai/fake-gpu-operator's `nvidia-smi`): `gpu` is the device's index among the scenario's NVIDIA devices; `UUID` is
`GPU-` and a name-based (SHA-1, version 5) UUID of `<hostname>-<index>`, as fake-gpu-operator derives them (the
namespace here is the DNS one); `pci_bus_id` is a deterministic bus per index; `device` is `nvidia<index>`; `modelName`
is the NVML product name (the sources give only the H100 SXM's; the others are the names NVML commonly reports,
unverified).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from .power import MEMORY_TEMP_RISE_C, TEMP_RISE_C, PowerModel, Thermal

PRODUCT_NAMES: dict[str, str] = {
    "A100-40GB": "NVIDIA A100-SXM4-40GB",
    "A100-80GB": "NVIDIA A100-SXM4-80GB",
    "A100-80GB-PCIe": "NVIDIA A100 80GB PCIe",
    "H100-SXM": "NVIDIA H100 80GB HBM3",
    "H100-PCIe": "NVIDIA H100 PCIe",
    "H100-NVL": "NVIDIA H100 NVL",
    "H200": "NVIDIA H200",
    "H200-NVL": "NVIDIA H200 NVL",
    "B200": "NVIDIA B200",
    "B300": "NVIDIA B300 SXM6 AC",
    "GB200": "NVIDIA GB200",
    "GB300": "NVIDIA GB300",
    "RTX-PRO-6000": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "L4": "NVIDIA L4",
    "L40S": "NVIDIA L40S",
    "A10": "NVIDIA A10",
    "A10G": "NVIDIA A10G",
    "T4": "Tesla T4",
    "RTX-4090": "NVIDIA GeForce RTX 4090",
}


@dataclass(frozen=True)
class Identity:
    """The labels that name one GPU."""

    device: str
    """The scenario's device id."""
    index: int
    uuid: str
    pci_bus_id: str
    model_name: str

    @classmethod
    def of(cls, device: str, index: int, profile_name: str, hostname: str) -> Identity:
        bus = f"{index // 16:08X}:{(index % 16) * 0x10 + 0x08:02X}:00.0"
        return cls(device, index, gpu_uuid(hostname, index), bus, PRODUCT_NAMES.get(profile_name, f"NVIDIA {profile_name}"))


def gpu_uuid(hostname: str, index: int) -> str:
    """A stable UUID for GPU `index` of a host, as NVML reports one; every exporter of the host uses it."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{hostname}-{index}')}"


@dataclass
class Override:
    """An injected field value: it replaces the derived one from `since` until `until` (or until cleared)."""

    value: float | int
    since: int
    until: int | None
    source: str

    def active(self, now: int) -> bool:
        return self.since <= now and (self.until is None or now < self.until)


@dataclass
class Board:
    """The telemetry state of one GPU between samples."""

    identity: Identity
    power: PowerModel
    nvlink: bool
    """Whether the GPU has an NVLink / fabric link (else the NVLink counter is not supported)."""
    row_remapping: bool
    """Whether the GPU remaps rows (A100 and later); else those counters are not supported."""
    die: Thermal = field(default_factory=lambda: Thermal(TEMP_RISE_C))
    memory: Thermal = field(default_factory=lambda: Thermal(MEMORY_TEMP_RISE_C))
    last_time: int = 0
    last_busy: float = 0.0
    last_tensor: float = 0.0
    last_dram: float = 0.0
    last_h2d: float = 0.0
    last_d2h: float = 0.0
    derived: dict[str, float | int] = field(default_factory=dict)
    """The last sample's values as the simulation derived them (before injections)."""
    overrides: dict[str, Override] = field(default_factory=dict)
    last_xid: int = 0
    xids: list[tuple[int, int]] = field(default_factory=list)
    """(time, code) of every XID, for the windowed count."""
    uncorrectable_rows: int = 0
    correctable_rows: int = 0
    remap_failed: bool = False
    lost_at: int | None = None
    """When the GPU fell off the bus (None while it is there)."""

    def values(self, now: int) -> dict[str, float | int]:
        """The last sample's values with the injections active at `now` in their place."""
        values = dict(self.derived)
        for name, override in self.overrides.items():
            if override.active(now):
                values[name] = override.value
        return values

    def xid_counts(self, now: int, window_ns: int) -> dict[int, int]:
        """XIDs per code in the `window_ns` before `now`."""
        counts: dict[int, int] = {}
        for time_ns, code in self.xids:
            if now - window_ns < time_ns <= now:
                counts[code] = counts.get(code, 0) + 1
        return counts

    def labels(self, hostname_label: str, hostname: str, driver: str) -> list[tuple[str, str]]:
        """The label pairs every sample line of this GPU starts with, in dcgm-exporter's order (`render_metrics.go`)."""
        ident = self.identity
        pairs = [("gpu", str(ident.index)), ("UUID", ident.uuid), ("pci_bus_id", ident.pci_bus_id),
                 ("device", f"nvidia{ident.index}"), ("modelName", ident.model_name)]
        if hostname_label != "none":
            pairs.append((hostname_label, hostname))
        pairs.append(("DCGM_FI_DRIVER_VERSION", driver))
        return pairs
