"""Power, temperature and clocks of a simulated GPU, from how busy it is.

The model is deliberately small; every constant says where it comes from.

- **Power.** A GPU draws its idle power with no kernel running and its board limit (the profile's
  TDP, from the vendors' datasheets) with kernels running:

      P(t) = P_idle + (TDP - P_idle) x busy(t),    busy(t) in {0, 1}

  so the mean power over a sample interval is `P_idle + (TDP - P_idle) x utilisation`, and the energy since boot is
  exact whatever the interval: `P_idle x t + (TDP - P_idle) x busy time`. `P_idle = IDLE_POWER_FRACTION x TDP`. The only
  published idle figure found is fake-gpu-operator's nvidia-smi line `33C P8 11W / 70W` (run-ai/fake-gpu-operator
  `cmd/nvidia-smi/main.go`), so the fraction is 11/70; it is a placeholder, not a measurement. Memory-bound and
  compute-bound work draw the same here.
- **Temperature.** First order, with a steady state linear in power:

      T_ss = T_idle + RISE x (P - P_idle) / (TDP - P_idle)
      T(t + dt) = T_ss + (T(t) - T_ss) x exp(-dt / TAU)

  applied per sample interval with the interval's mean power (exact for power constant over the
  interval). `T_idle` = 33 C from the same nvidia-smi line; `RISE` and `TAU` are assumptions (no
  published figure found). The memory (HBM) temperature follows the same law
  driven by the memory interface's activity (`DCGM_FI_PROF_DRAM_ACTIVE`) instead of power.
- **Clocks.** The SM clock is the GPU's maximum while any kernel ran in the interval, else an idle
  clock; the memory clock does not change. The maximum clocks are the GPUs' commonly cited boost
  and memory clocks: no source checked here states them, so they are unverified, and unknown GPUs get a
  placeholder.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

IDLE_POWER_FRACTION = 11 / 70
"""Idle power over TDP (fake-gpu-operator's `11W / 70W`; a placeholder)."""
IDLE_TEMP_C = 33.0
"""Temperature of an idle GPU (fake-gpu-operator's `33C`)."""
TEMP_RISE_C = 45.0
"""Steady-state rise over idle at TDP (assumption)."""
MEMORY_TEMP_RISE_C = 45.0
"""Steady-state rise of the memory over idle with its interface always active (assumption)."""
THERMAL_TAU_S = 60.0
"""Thermal time constant of GPU and heat sink (assumption)."""
IDLE_SM_CLOCK_MHZ = 210
"""SM clock of an idle GPU (assumption)."""

CLOCKS_MHZ: dict[str, tuple[int, int]] = {
    "A100-40GB": (1410, 1215),
    "A100-80GB": (1410, 1593),
    "A100-80GB-PCIe": (1410, 1512),
    "H100-SXM": (1980, 2619),
    "H100-PCIe": (1755, 1593),
    "H100-NVL": (1785, 2619),
    "H200": (1980, 3201),
    "H200-NVL": (1785, 3201),
    "B200": (1965, 3996),
    "B300": (1965, 3996),
    "GB200": (1965, 3996),
    "GB300": (1965, 3996),
    "RTX-PRO-6000": (2430, 14001),
    "L4": (2040, 6251),
    "L40S": (2520, 9001),
    "A10": (1695, 6251),
    "A10G": (1710, 6251),
    "T4": (1590, 5001),
    "RTX-4090": (2520, 10501),
}
"""(max SM clock, memory clock) by profile (unverified; see the module docstring)."""
DEFAULT_CLOCKS_MHZ = (1500, 1500)
"""Clocks of a GPU without a profile (placeholder)."""


@dataclass(frozen=True)
class PowerModel:
    """The power and clock figures of one GPU."""

    tdp_mw: int
    max_sm_clock: int
    memory_clock: int

    @classmethod
    def of(cls, profile_name: str, tdp_mw: int) -> PowerModel:
        sm, memory = CLOCKS_MHZ.get(profile_name, DEFAULT_CLOCKS_MHZ)
        return cls(tdp_mw, sm, memory)

    @property
    def idle_mw(self) -> int:
        return round(self.tdp_mw * IDLE_POWER_FRACTION)

    def power_w(self, utilisation: float) -> float:
        """Mean power over an interval with this share of time busy."""
        return (self.idle_mw + (self.tdp_mw - self.idle_mw) * utilisation) / 1000

    def energy_mj(self, elapsed_ns: int, busy_ns: float) -> int:
        """Energy since boot (t = 0) in mJ: idle power all along, the rest while busy (mW x ns = 1e-9 mJ)."""
        return int((self.idle_mw * elapsed_ns + (self.tdp_mw - self.idle_mw) * busy_ns) // 1_000_000_000)

    def sm_clock(self, utilisation: float) -> int:
        return self.max_sm_clock if utilisation > 0 else IDLE_SM_CLOCK_MHZ


@dataclass
class Thermal:
    """One first-order temperature (GPU die or memory), stepped once per sample interval."""

    rise_c: float
    celsius: float = IDLE_TEMP_C

    def step(self, load: float, elapsed_ns: int) -> float:
        """Move towards the steady state of `load` (0..1) for `elapsed_ns`; the new temperature."""
        steady = IDLE_TEMP_C + self.rise_c * min(max(load, 0.0), 1.0)
        if elapsed_ns > 0:
            self.celsius = steady + (self.celsius - steady) * math.exp(-elapsed_ns / 1e9 / THERMAL_TAU_S)
        return self.celsius
