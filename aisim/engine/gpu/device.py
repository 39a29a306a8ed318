"""One GPU device's engines (SMs, two copy engines) and its streams, and how a graph of ops runs on them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from ...scenario.hardware import Gpu
from ...telemetry.board import gpu_uuid
from ...telemetry.power import PowerModel
from ..kernel import Kernel
from ..timeline import Timeline
from .compute import ComputeEngine, Job
from .copy import Copy, CopyEngine
from .graph import Op
from .meter import Activity


class User(Protocol):
    """An engine replica placed on a device."""

    def interrupt(self) -> None: ...


class GpuDevice:
    """The SMs, the H2D and D2H copy engines and the stream priorities of one device."""

    def __init__(self, kernel: Kernel, device: str, gpu: Gpu, timeline: Timeline) -> None:
        profile = gpu.resolved()
        greatest = profile.greatest_stream_priority
        self.device = device
        self.priorities = {s.name: max(greatest, min(0, s.priority)) for s in gpu.streams}
        """Stream priorities, clamped into the device's range as CUDA does."""
        preemption = gpu.preemption
        self.compute = ComputeEngine(kernel, device, timeline, preemption.context_switch, preemption.wait_threshold,
                                     preemption.max_per_second)
        self.h2d = CopyEngine(kernel, device, "h2d", timeline)
        self.d2h = CopyEngine(kernel, device, "d2h", timeline)
        self.host_link = float(profile.host_link_bandwidth)
        self.uuid = gpu_uuid("aisim", 0)
        """The UUID NVML reports (the simulation numbers its GPUs: `gpu_uuid(hostname, index)`)."""
        self.power = PowerModel.of(profile.name, profile.tdp_mw)
        """Power, as the telemetry model derives it from utilisation."""
        self.placed: list[User] = []
        """Engine replicas placed on this device."""
        self.meter = Activity()
        """Work its replicas account here themselves (steps that bypass the stream scheduler)."""
        self.metered = False
        """Whether telemetry reads this device: replicas placed here then account their work."""

    @property
    def users(self) -> int:
        return len(self.placed)

    def attach(self, user: User) -> None:
        """A replica is placed here. The first one to share the device with others ends its planned
        run of steps at the next step boundary, so that from then on its kernels contend."""
        self.placed.append(user)
        if len(self.placed) == 2:
            self.placed[0].interrupt()
        if self.metered:
            self._meter(user)

    def start_metering(self) -> None:
        """Telemetry reads this device from now on: its replicas account their work."""
        self.metered = True
        for user in self.placed:
            self._meter(user)

    @staticmethod
    def _meter(user: User) -> None:
        start = getattr(user, "start_metering", None)
        if start is not None:
            start()

    def activity(self, now: int) -> Activity:
        """Everything this device has done up to `now` (`meter.py`), work in flight included pro rata."""
        total = self.meter.copy()
        busy, tensor, dram = self.compute.activity(now)
        total.busy_ns += busy
        total.tensor_ns += tensor
        total.dram_ns += dram
        total.h2d_bytes += self.h2d.moved_bytes(now, self.host_link)
        total.d2h_bytes += self.d2h.moved_bytes(now, self.host_link)
        for user in self.placed:
            in_flight = getattr(user, "in_flight", None)
            if in_flight is not None:
                part = in_flight(now, self)
                if part is not None:
                    total.add(part)
        return total

    def detach(self, user: User) -> None:
        if user in self.placed:
            self.placed.remove(user)

    def priority(self, stream: str) -> int:
        """A stream's priority; a side stream (`name.out`) has its parent's; unknown streams are 0."""
        return self.priorities.get(stream.split(".", 1)[0], 0)


class GraphRun:
    """One step's ops on the devices of a tensor-parallel group; `on_done` when every device is done.

    CUDA stream semantics: an op starts when the previous op of its stream and the ops it waits on
    (events) are done. Each device runs its own copy of the graph (tensor-parallel shards); the step
    ends with the slowest.
    """

    def __init__(self, devices: Sequence[GpuDevice], ops: list[Op], owner: str, on_done: Callable[[], None],
                 activity: tuple[float, float] = (0.0, 0.0)) -> None:
        """`activity`: the (tensor, dram) shares of its kernels' time, for telemetry."""
        self.ops = ops
        self.owner = owner
        self.on_done = on_done
        self.activity = activity
        self.left = len(devices) * len(ops)
        last_on: dict[str, int] = {}
        self.after: list[list[int]] = [[] for _ in ops]
        """Per op, the ops that wait for it."""
        needs = []
        for index, op in enumerate(ops):
            before = set(op.waits)
            if op.stream in last_on:
                before.add(last_on[op.stream])
            last_on[op.stream] = index
            for earlier in before:
                self.after[earlier].append(index)
            needs.append(len(before))
        self.pending = {device.device: list(needs) for device in devices}
        self.devices = list(devices)
        for device in devices:
            for index, count in enumerate(needs):
                if count == 0:
                    self._launch(device, index)

    def _launch(self, device: GpuDevice, index: int) -> None:
        op = self.ops[index]

        def done(_: object) -> None:
            self._done(device, index)

        if op.engine == "compute":
            device.compute.submit(Job(op.name, self.owner, op.stream, device.priority(op.stream), op.work, done,
                                      *self.activity))
        else:
            engine = device.h2d if op.engine == "h2d" else device.d2h
            engine.submit(Copy(op.name, self.owner, op.stream, op.work, done))

    def _done(self, device: GpuDevice, index: int) -> None:
        pending = self.pending[device.device]
        for following in self.after[index]:
            pending[following] -= 1
            if pending[following] == 0:
                self._launch(device, following)
        self.left -= 1
        if self.left == 0:
            self.on_done()
