"""XID errors: the exporter's message for each code, and what each does to the work on the GPU.

Messages are exact from dcgm-exporter `xid_errors.go`; meanings and actions paraphrase NVIDIA's Xid catalog
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html). In aisim the engine replicas on one GPU share
its memory pool "as if they were one process", so "the application" of an XID is all of them.

Effects, by what the catalogue says happens:

- `gpu_lost` (79, fallen off the bus): the engines on the GPU die and the GPU answers nothing more:
  every field but `DCGM_FI_DEV_XID_ERRORS` is blank from then on (NVML reports the GPU as lost).
- `kill` (95 uncontained ECC: all applications on the GPU are affected; 94 contained ECC: the
  application that hit the page dies, other work continues; 13, 31 and 43: an application fault
  that stops its channel): the engines on the GPU die, as a CUDA error kills a vLLM engine. The
  GPU stays up: telemetry goes on.
- `nvlink` (74): engines that all-reduce over NVLink (tensor parallel) die, as NCCL fails; the
  models of the others go DEGRADED (isolate and reset the GPU).
- `degraded` (48 double-bit ECC: drain and reset; 63 row remapping recorded: reset to activate;
  64 remapping failed: drain and RMA): work goes on, the models placed on the GPU go DEGRADED.
- `none`: every other code (follow-on or unverified meanings): recorded and counted only.

Memory counters: 48, 94 and 95 remap the failing row (`DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS`
+1), 63 records a remap (`DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS` +1) and 64 sets
`DCGM_FI_DEV_ROW_REMAP_FAILURE`; a simplification of row remapping on A100 and later GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Effect = Literal["gpu_lost", "kill", "nvlink", "degraded", "none"]

MESSAGES: dict[int, str] = {
    0: "No Error",
    8: "GPU stopped processing",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda",
    48: "Double Bit ECC Error",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    154: "GPU Recovery Action Changed",
}
"""`err_msg` of `DCGM_FI_DEV_XID_ERRORS` by code."""

UNKNOWN = "Unknown Error"

EFFECTS: dict[int, Effect] = {79: "gpu_lost", 95: "kill", 94: "kill", 13: "kill", 31: "kill", 43: "kill",
                              74: "nvlink", 48: "degraded", 63: "degraded", 64: "degraded"}

ACTIONS: dict[int, str] = {
    13: "restart the application",
    31: "restart the application",
    43: "restart the application",
    48: "drain and reset the GPU",
    63: "reset the GPU to activate the remapping",
    64: "drain the GPU and RMA it",
    74: "isolate and reset the GPU",
    79: "reboot the node or RMA the GPU",
    94: "reset the GPU at the next window",
    95: "reset the GPU now",
}


@dataclass(frozen=True)
class Xid:
    """One XID code: its exporter message and its effect on the work of the GPU."""

    code: int

    @property
    def message(self) -> str:
        return MESSAGES.get(self.code, UNKNOWN)

    @property
    def effect(self) -> Effect:
        return EFFECTS.get(self.code, "none")

    @property
    def action(self) -> str:
        return ACTIONS.get(self.code, "")

    def kernel_log(self, bus_id: str) -> str:
        """The driver's kernel log line (`NVRM: Xid (PCI:<bus>): <code>, pid=..., <text>`), which is what
        a dead engine's log shows as the cause. `bus_id` is the exporter's `pci_bus_id`
        (`00000000:3B:00.0`); the kernel writes it short (`0000:3b:00`). Pid and process are not modelled."""
        domain, bus, device = bus_id.lower().split(":")
        return f"NVRM: Xid (PCI:{domain[-4:]}:{bus}:{device.split('.')[0]}): {self.code}, pid='<unknown>', " \
               f"name=<unknown>, {self.message}."

    @property
    def uncorrectable_remap(self) -> bool:
        return self.code in (48, 94, 95)
