"""GPUs: hardware profile, memory pool layout, CUDA streams and preemption settings."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import (
    TYPE_CHECKING,
    Annotated,
    ClassVar,
    Literal,
    TypeAlias,
    TypedDict,
    cast,
)

from pydantic import Field, PrivateAttr, field_validator, model_validator

from .base import Spec
from .presets import GPU_PROFILES, GpuProfile, approximate_capacity
from .units import Bandwidth, ByteSize, Duration, FlopRate, Power

Identifier = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$", max_length=128)]
"""A name other parts of the scenario refer to."""

if TYPE_CHECKING:
    GpuProfileName: TypeAlias = str
else:
    GpuProfileName = Literal[tuple(GPU_PROFILES)]
"""A built-in profile's name: a Literal of `GPU_PROFILES`' keys, built at import time (so the schema
lists them); a type checker cannot evaluate it and sees a plain str."""



class Hardware(Spec):
    """Explicit hardware numbers; with a `profile`, each one given here overrides the profile's."""

    memory: ByteSize | None = None
    """Datasheet memory size (`80GB`)."""
    capacity: ByteSize | None = None
    """Total memory as software reports it (`79.1GiB`); defaults to the nominal size in GiB x 0.989."""
    memory_bandwidth: Bandwidth | None = None
    """Datasheet memory bandwidth (`3.35TB/s`)."""
    fp16_flops: FlopRate | None = None
    """Dense BF16/FP16 tensor throughput (`989TFLOPS`)."""
    fp8_flops: FlopRate | None = None
    """Dense FP8 tensor throughput; absent when the GPU has no FP8 tensor cores."""
    pcie_generation: int | None = Field(None, ge=3, le=6)
    """PCIe generation of the x16 host link (3, 4, 5 or 6)."""
    interconnect_bandwidth: Bandwidth | None = None
    """NVLink / fabric bandwidth per GPU, both directions together (`900GB/s`)."""
    tdp: Power | None = None
    """Board power limit (`700W`)."""
    sms: int | None = Field(None, ge=1, le=1024)
    """Streaming multiprocessors (or compute units)."""
    compute_capability: str | None = Field(None, pattern=r"^(\d+\.\d+|gfx\d+)$")
    """CUDA compute capability (`9.0`), checked by TensorRT engine compatibility."""
    launch_latency: Duration | None = None
    """Host cost of one kernel launch (default 4us)."""
    greatest_stream_priority: int | None = Field(None, ge=-7, le=0)
    """Highest stream priority the device supports (CUDA: -5 on recent GPUs, -2 on Pascal)."""

    REQUIRED_WITHOUT_PROFILE: ClassVar[tuple[str, ...]] = ("memory", "memory_bandwidth", "fp16_flops")


class Thresholds(Spec):
    """Pool usage fractions that raise warning and critical events."""

    warning: float = Field(0.85, gt=0, le=1)
    """Usage fraction that raises a warning event."""
    critical: float = Field(0.92, gt=0, le=1)
    """Usage fraction that raises a critical event."""

    @model_validator(mode="after")
    def _ordered(self) -> Thresholds:
        if self.warning >= self.critical:
            raise ValueError("warning must be below critical")
        return self


class PoolCommon(Spec):
    """The fields every allocator's pool has (checked alone when the allocator is unknown)."""

    reserved_fraction: float = Field(0.0, ge=0, lt=1)
    """Share of the GPU's capacity held outside the pool (CUDA context, other processes)."""
    thresholds: Thresholds = Thresholds()
    """Warning and critical usage thresholds (0.85 / 0.92)."""


MIN_SPLIT_SIZE = 20 * 2**20
"""The smallest `max_split_size` PyTorch accepts (its large-segment size, 20 MiB)."""


class CachingPool(PoolCommon):
    """PyTorch's CUDA caching allocator: 512 B rounding, 2 MiB / 20 MiB segments, split and merge."""

    allocator: Literal["caching"]
    """Allocator model."""
    max_split_size: ByteSize | None = None
    """Blocks at least this large are never split (`max_split_size_mb`; at least 20MiB)."""
    expandable_segments: bool = False
    """One growing segment per stream and pool, mapped in pages (`expandable_segments:True`)."""
    roundup_power2_divisions: int | None = Field(None, ge=1, le=64)
    """Round requests up to this many steps per power of two (`roundup_power2_divisions`)."""
    garbage_collection_threshold: float | None = Field(None, gt=0, lt=1)
    """Reclaim cached blocks proactively above this usage (`garbage_collection_threshold`)."""

    @field_validator("max_split_size")
    @classmethod
    def _split_at_least_20mib(cls, value: int | None) -> int | None:
        if value is not None and value < MIN_SPLIT_SIZE:  # PyTorch's own check (`CUDAAllocatorConfig`)
            raise ValueError("maxSplitSize must be at least 20MiB (PyTorch: max_split_size_mb must be >= 20)")
        return value


class BuddyPool(PoolCommon):
    """A binary buddy allocator: power-of-two blocks that split in halves and merge with their buddy."""

    allocator: Literal["buddy"]
    """Allocator model."""
    min_block: ByteSize = 512
    """Smallest block; requests are rounded up to a power of two at least this large."""

    @field_validator("min_block")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value <= 0 or value & (value - 1):
            raise ValueError(f"minBlock must be a power of two (such as 512B or 4KiB), not {value} bytes")
        return value


class SlabPool(PoolCommon):
    """A slab allocator: fixed size classes carved from equal slabs; larger requests get their own segment."""

    allocator: Literal["slab"]
    """Allocator model."""
    size_classes: list[ByteSize] = Field(default_factory=lambda: [2**k for k in range(9, 21)], min_length=1)
    """Object sizes served from slabs, ascending (default 512B to 1MiB in powers of two)."""
    slab_size: ByteSize = 2 * 2**20
    """Size of one slab (default 2MiB)."""

    @field_validator("size_classes")
    @classmethod
    def _ascending(cls, value: list[int]) -> list[int]:
        if any(c <= 0 for c in value) or sorted(set(value)) != value:
            raise ValueError("size classes must be above zero and strictly ascending")
        return value

    @field_validator("slab_size")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("slabSize must be above zero")
        return value

    @model_validator(mode="after")
    def _classes_fit(self) -> SlabPool:
        if self.size_classes and self.size_classes[-1] > self.slab_size:
            raise ValueError(f"every size class must fit in one slab ({self.slab_size} bytes)")
        return self


MemoryPool = Annotated[CachingPool | BuddyPool | SlabPool, Field(discriminator="allocator")]


class Stream(Spec):
    """A CUDA stream; lower priority numbers run first (CUDA's convention: 0 is the lowest)."""

    name: Identifier
    """Stream name that models and priority classes refer to."""
    priority: int = Field(0, le=0)
    """CUDA stream priority: 0 (default, lowest) down to the GPU's greatest priority (-5)."""


class Preemption(Spec):
    """How higher-priority work takes the GPU from lower-priority streams at kernel boundaries."""

    wait_threshold: Duration = 0
    """How long high-priority work waits before it preempts at the next kernel boundary."""
    context_switch: Duration = 10_000
    """Delay injected on each preemption (default 10us)."""
    max_per_second: int | None = Field(None, ge=1)
    """Cap on preemptions per second on this GPU; unlimited when absent."""


class _ProfileChanges(TypedDict, total=False):
    """`GpuProfile` fields that a `Hardware` entry sets (those it gives), for `dataclasses.replace`."""

    memory: int
    capacity: int
    memory_bandwidth: int
    fp16_flops: int
    fp8_flops: int
    pcie_generation: int
    interconnect_bandwidth: int
    tdp_mw: int
    sms: int
    compute_capability: str
    launch_latency_ns: int
    greatest_stream_priority: int
    capacity_source: str


def _default_streams() -> list[Stream]:
    return [Stream(name="default", priority=0)]


class Gpu(Spec):
    """One GPU, or `count` identical GPUs named `<id>-0`, `<id>-1`, ..."""

    id: Identifier
    """Name that model placements refer to."""
    profile: GpuProfileName | None = None
    """Built-in hardware profile (see `aisim.scenario.presets`)."""
    hardware: Hardware | None = None
    """Explicit numbers; required without a profile, overrides with one."""
    count: int = Field(1, ge=1, le=1024)
    """How many identical GPUs this entry declares."""
    memory_pool: MemoryPool = CachingPool(allocator="caching")
    """Memory pool layout (allocator `caching`, `buddy` or `slab`)."""
    streams: list[Stream] = Field(default_factory=_default_streams, min_length=1)
    """CUDA streams on this GPU; `default` (priority 0) when absent."""
    preemption: Preemption = Preemption()
    """Stream preemption settings."""
    _resolved: tuple[tuple[str, str | None, Hardware | None], GpuProfile] | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _has_numbers(self) -> Gpu:
        if self.profile is None:
            given = self.hardware.model_fields_set if self.hardware else set()
            missing = [name for name in Hardware.REQUIRED_WITHOUT_PROFILE if name not in given]
            if missing:
                names = ", ".join(Hardware.model_fields[m].alias or m for m in missing)
                raise ValueError(f"without a profile, hardware must give {names}")
        return self

    def device_ids(self) -> list[str]:
        """The ids of the devices this entry declares."""
        return [self.id] if self.count == 1 else [f"{self.id}-{i}" for i in range(self.count)]

    def resolved(self) -> GpuProfile:
        """The profile with this entry's explicit numbers applied (computed once: the entry is frozen, and the engine
        asks for it per replica, per model and per telemetry source)."""
        key = (self.id, self.profile, self.hardware)  # `model_copy(update=...)` copies the cache with the entry
        if self._resolved is None or self._resolved[0] != key:
            self._resolved = (key, self._resolve())
        return self._resolved[1]

    def _resolve(self) -> GpuProfile:
        base = GPU_PROFILES[self.profile] if self.profile else None
        hw = self.hardware or Hardware()
        changes = {
            "memory": hw.memory,
            "capacity": hw.capacity,
            "memory_bandwidth": hw.memory_bandwidth,
            "fp16_flops": hw.fp16_flops,
            "fp8_flops": hw.fp8_flops,
            "pcie_generation": hw.pcie_generation,
            "interconnect_bandwidth": hw.interconnect_bandwidth,
            "tdp_mw": hw.tdp,
            "sms": hw.sms,
            "compute_capability": hw.compute_capability,
            "launch_latency_ns": hw.launch_latency,
            "greatest_stream_priority": hw.greatest_stream_priority,
        }
        # `changes` less its None values holds exactly the `_ProfileChanges` types (mypy cannot narrow a comprehension)
        given = cast(_ProfileChanges, {k: v for k, v in changes.items() if v is not None})
        if base is None:
            memory = given["memory"]
            base = GpuProfile(
                name=self.id,
                memory=memory,
                capacity=approximate_capacity(memory),
                memory_bandwidth=given["memory_bandwidth"],
                fp16_flops=given["fp16_flops"],
                fp8_flops=None,
                pcie_generation=4,
                interconnect_bandwidth=None,
                tdp_mw=300_000,
                sms=100,
                compute_capability="8.0",
                capacity_source="approximate (nominal GiB x 0.989)",
            )
        elif "memory" in given and "capacity" not in given:
            given["capacity"] = approximate_capacity(given["memory"])
        if "capacity" in given:
            given["capacity_source"] = "scenario"
        return dataclasses.replace(base, **given)


def expand_devices(names: Iterable[str], devices: Mapping[str, Gpu]) -> list[str]:
    """The device ids that GPU names stand for: a multi-device entry's id stands for all its
    devices, a device id for itself; unknown names are skipped."""
    expanded: list[str] = []
    for name in names:
        gpu = devices.get(name)
        if gpu is not None:
            expanded += gpu.device_ids() if name == gpu.id else [name]
    return expanded
