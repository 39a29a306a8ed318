"""Sampling the simulated GPUs into DCGM field values, at the scenario's `telemetry.interval`.

The sampler is a kernel observer (`Kernel.observe`): it runs after everything else at its instant
and never keeps a run alive, so a headless run ends (and reports) exactly as without telemetry. Each
sample reads every GPU's cumulative activity (`engine/gpu/meter.py`) and its memory pool, derives
the fields over the interval since the previous sample, steps the thermal model, and writes one
`gpu_sample` record per GPU to the timeline. What it reads never changes the simulation.

Values: utilisations are busy time over the interval (NVML's definition) as an integer percent;
`DCGM_FI_DEV_MEM_COPY_UTIL` is NVML's memory utilisation, the share of time device memory was read
or written (the memory interface's activity at its datasheet bandwidth), not the copy engines,
whose traffic is in the PCIe fields; FB used is what the pool holds from the device (its reserved
bytes) plus memory outside it (non-PyTorch memory, other processes), as nvidia-smi shows it, and
FB free the rest of the capacity; nothing is driver-reserved beyond the capacity software reports,
so FB reserved is 0. Encoders and decoders are idle. A vGPU license status is not supported
(blank) on a bare-metal GPU. Power, energy, temperatures and clocks come from `power.py`.

Injections (`inject`) behave like `dcgmInjectFieldValue` with one difference: the value stays the
latest sample until it is cleared or its duration ends, instead of until DCGM's next sample, so
that a scenario can hold a value. XIDs are events: the XID field changes at once, not at the next
sample.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..scenario.dcgm_fields import CATALOGUE, DEFAULT_FIELDS, DcgmField
from .board import Board, Identity, Override
from .exposition import render
from .fields import coerce, is_blank, lookup
from .power import PowerModel
from .xid import Xid

if TYPE_CHECKING:
    from ..scenario.presets import GpuProfile
    from ..scenario.server import Telemetry

MIB = 2**20
DRIVER_FIELD = "DCGM_FI_DRIVER_VERSION"


class Clock(Protocol):
    """What the sampler needs from the event kernel."""

    now: int

    def observe(self, time_ns: int, handler: Callable[[], None]) -> Any: ...


class Records(Protocol):
    """What the sampler needs from the timeline."""

    def add(self, time_ns: int, kind: str, *fields: Any) -> None: ...


class Activity(Protocol):
    """A GPU's cumulative work up to an instant (the engine's `gpu.meter.Activity`)."""

    @property
    def busy_ns(self) -> float: ...
    @property
    def tensor_ns(self) -> float: ...
    @property
    def dram_ns(self) -> float: ...
    @property
    def h2d_bytes(self) -> float: ...
    @property
    def d2h_bytes(self) -> float: ...
    @property
    def nvlink_bytes(self) -> float: ...


class Gpu(Protocol):
    """What the sampler reads from a GPU device (the engine's `GpuDevice`)."""

    def start_metering(self) -> None: ...
    def activity(self, now: int) -> Activity: ...


class Outside(Protocol):
    """Device memory outside the pool (the engine's `pool.device.Device`)."""

    @property
    def outside(self) -> int: ...


class Pool(Protocol):
    """What the sampler reads from a GPU's memory pool (the engine's `pool.Allocator`)."""

    @property
    def device(self) -> Outside: ...
    @property
    def capacity(self) -> int: ...
    def memory_reserved(self) -> int: ...


@dataclass(frozen=True)
class Source:
    """One GPU device to sample: its profile, its engines and its memory pool."""

    device: str
    profile: GpuProfile
    gpu: Gpu
    pool: Pool


class GpuTelemetry:
    """The DCGM view of a simulation's NVIDIA GPUs (see the module docstring)."""

    def __init__(self, kernel: Clock, timeline: Records, settings: Telemetry, sources: list[Source]) -> None:
        self.kernel = kernel
        self.timeline = timeline
        self.settings = settings
        self.interval = settings.interval
        dcgm = settings.dcgm
        wanted = set(dcgm.fields) if dcgm.fields is not None else set(DEFAULT_FIELDS)
        self.fields: list[DcgmField] = [f for f in CATALOGUE if f.name in wanted]
        """Exported fields, in exposition order."""
        self.sources = {s.device: s for s in sources if s.profile.vendor == "nvidia"}
        self.boards: dict[str, Board] = {}
        for index, source in enumerate(self.sources.values()):
            profile = source.profile
            identity = Identity.of(source.device, index, profile.name, dcgm.hostname)
            self.boards[source.device] = Board(identity, PowerModel.of(profile.name, profile.tdp_mw),
                                               nvlink=profile.interconnect_bandwidth is not None,
                                               row_remapping=_remaps_rows(profile.compute_capability))
            source.gpu.start_metering()
        self.peak_temp: dict[str, float] = {}
        self.samples = 0
        kernel.observe(kernel.now, self._tick)

    # -- sampling ----------------------------------------------------------------------------

    def _tick(self) -> None:
        self.sample()
        self.kernel.observe(self.kernel.now + self.interval, self._tick)

    def sample(self) -> None:
        """Sample every GPU now and put one `gpu_sample` record per GPU on the timeline."""
        now = self.kernel.now
        self.samples += 1
        for device, board in self.boards.items():
            self._derive(board, self.sources[device], now)
            values = board.values(now)
            exported = {f.name: values[f.name] for f in self.fields
                        if f.name in values and not is_blank(values[f.name])}
            self.timeline.add(now, "gpu_sample", device, exported)

    def _derive(self, board: Board, source: Source, now: int) -> None:
        elapsed = now - board.last_time
        if board.lost_at is not None:
            board.derived = {"DCGM_FI_DEV_XID_ERRORS": board.last_xid}
            board.last_time = now
            return
        act = source.gpu.activity(now)
        seconds = elapsed / 1e9

        def share(total: float, before: float) -> float:
            return min(max((total - before) / elapsed, 0.0), 1.0) if elapsed > 0 else 0.0

        util = share(act.busy_ns, board.last_busy)
        tensor = share(act.tensor_ns, board.last_tensor)
        dram = share(act.dram_ns, board.last_dram)
        rx = (act.h2d_bytes - board.last_h2d) / seconds if elapsed > 0 else 0.0
        tx = (act.d2h_bytes - board.last_d2h) / seconds if elapsed > 0 else 0.0
        die = board.die.step(util, elapsed)
        memory = board.memory.step(dram, elapsed)
        self.peak_temp[source.device] = max(self.peak_temp.get(source.device, 0.0), die)
        pool = source.pool
        used = pool.memory_reserved() + pool.device.outside
        power = board.power
        derived: dict[str, float | int] = {
            "DCGM_FI_DEV_SM_CLOCK": power.sm_clock(util),
            "DCGM_FI_DEV_MEM_CLOCK": power.memory_clock,
            "DCGM_FI_DEV_MEMORY_TEMP": round(memory),
            "DCGM_FI_DEV_GPU_TEMP": round(die),
            "DCGM_FI_DEV_POWER_USAGE": power.power_w(util),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": power.energy_mj(now, act.busy_ns),
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0,
            "DCGM_FI_DEV_GPU_UTIL": round(100 * util),
            "DCGM_FI_DEV_MEM_COPY_UTIL": round(100 * dram),
            "DCGM_FI_DEV_ENC_UTIL": 0,
            "DCGM_FI_DEV_DEC_UTIL": 0,
            "DCGM_FI_DEV_FB_FREE": max(pool.capacity - used, 0) // MIB,
            "DCGM_FI_DEV_FB_USED": used // MIB,
            "DCGM_FI_DEV_FB_RESERVED": 0,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": util,
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": tensor,
            "DCGM_FI_PROF_DRAM_ACTIVE": dram,
            "DCGM_FI_PROF_PCIE_TX_BYTES": int(tx),
            "DCGM_FI_PROF_PCIE_RX_BYTES": int(rx),
        }
        if board.nvlink:
            derived["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] = int(act.nvlink_bytes)
        board.derived = derived
        self._xid_fields(board)
        board.last_time = now
        board.last_busy, board.last_tensor, board.last_dram = act.busy_ns, act.tensor_ns, act.dram_ns
        board.last_h2d, board.last_d2h = act.h2d_bytes, act.d2h_bytes

    @staticmethod
    def _xid_fields(board: Board) -> None:
        board.derived["DCGM_FI_DEV_XID_ERRORS"] = board.last_xid
        if board.row_remapping:
            board.derived["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"] = board.uncorrectable_rows
            board.derived["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"] = board.correctable_rows
            board.derived["DCGM_FI_DEV_ROW_REMAP_FAILURE"] = int(board.remap_failed)

    # -- lookups -----------------------------------------------------------------------------

    def board(self, gpu: str | int) -> Board:
        """A GPU by device id or by its DCGM index; KeyError when there is none."""
        if isinstance(gpu, int) and not isinstance(gpu, bool):
            for board in self.boards.values():
                if board.identity.index == gpu:
                    return board
        elif gpu in self.boards:
            return self.boards[gpu]
        raise KeyError(f"no NVIDIA GPU {gpu!r} (known: {', '.join(self.boards)})")

    # -- injections and XIDs -----------------------------------------------------------------

    def inject(self, gpu: str | int, field: str | int, value: float | str, duration_ns: int | None = None,
               source: str = "admin") -> Override:
        """Make `value` the latest sample of `field` on `gpu` from now, until cleared or for `duration_ns`.
        Raises `KeyError` (GPU) or `FieldError` (field, value)."""
        board = self.board(gpu)
        spec = lookup(field)
        number = coerce(spec, value)
        now = self.kernel.now
        until = None if duration_ns is None else now + duration_ns
        override = Override(number, now, until, source)
        board.overrides[spec.name] = override
        device = board.identity.device
        self.timeline.add(now, "dcgm_inject", device, spec.name, number, until, source)
        if until is not None:
            self.kernel.observe(until, lambda: self._expire(board, spec.name, override))
        return override

    def _expire(self, board: Board, name: str, override: Override) -> None:
        if board.overrides.get(name) is override:
            del board.overrides[name]
            self.timeline.add(self.kernel.now, "dcgm_clear", board.identity.device, name, "expired")

    def clear(self, gpu: str | int, field: str | int | None = None, source: str = "admin") -> list[str]:
        """End the injections on `gpu` (one field, or all); the fields cleared."""
        board = self.board(gpu)
        names = list(board.overrides) if field is None else [lookup(field).name]
        cleared = [name for name in names if board.overrides.pop(name, None) is not None]
        for name in cleared:
            self.timeline.add(self.kernel.now, "dcgm_clear", board.identity.device, name, source)
        return cleared

    def record_xid(self, gpu: str, code: int) -> None:
        """An XID happened on `gpu` now: the XID field, the counters, and a lost GPU's blank fields."""
        board = self.boards.get(gpu)
        if board is None:
            return
        xid = Xid(code)
        board.last_xid = code
        board.xids.append((self.kernel.now, code))
        if xid.uncorrectable_remap:
            board.uncorrectable_rows += 1
        elif code == 63:
            board.correctable_rows += 1
        elif code == 64:
            board.remap_failed = True
        if xid.effect == "gpu_lost" and board.lost_at is None:
            board.lost_at = self.kernel.now
        if board.lost_at is not None:
            board.derived = {"DCGM_FI_DEV_XID_ERRORS": code}
        else:
            self._xid_fields(board)

    def bus_id(self, gpu: str) -> str:
        board = self.boards.get(gpu)
        return board.identity.pci_bus_id if board else "00000000:00:00.0"

    # -- outputs -----------------------------------------------------------------------------

    def exposition(self, attributes: Sequence[tuple[str, str]] = ()) -> str:
        """dcgm-exporter's `/metrics` text now: the last sample with the injections active now (`attributes`:
        its Kubernetes mode's pod labels)."""
        dcgm = self.settings.dcgm
        driver = dcgm.driver_version if any(f.name == DRIVER_FIELD for f in self.fields) else None
        now = self.kernel.now
        window = dcgm.xid_count_window
        return render(self.fields, [(b, b.values(now), b.xid_counts(now, window)) for b in self.boards.values()],
                      dcgm.hostname_label, dcgm.hostname, driver, window, attributes)

    def summary(self, end_ns: int) -> dict[str, dict[str, Any]]:
        """Per GPU over the run: mean utilisation, energy, peak temperature, XIDs (for the report)."""
        result: dict[str, dict[str, Any]] = {}
        for device, board in self.boards.items():
            span = board.lost_at if board.lost_at is not None else end_ns
            act = self.sources[device].gpu.activity(span)
            result[device] = {
                "dcgm_gpu": board.identity.index,
                "mean_gpu_util": round(act.busy_ns / span, 6) if span else 0.0,
                "energy_j": round(board.power.energy_mj(span, act.busy_ns) / 1000, 3),
                "peak_gpu_temp_c": round(self.peak_temp.get(device, 0.0), 1),
                "xids": [code for _, code in board.xids],
                "fell_off_bus_s": round(board.lost_at / 1e9, 6) if board.lost_at is not None else None,
            }
        return result


def _remaps_rows(compute_capability: str) -> bool:
    """Row remapping exists on NVIDIA GPUs of compute capability 8.0 and later (A100 on)."""
    try:
        return float(compute_capability) >= 8.0
    except ValueError:
        return False
