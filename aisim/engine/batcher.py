"""Triton's scheduling of one model version: a dynamic batcher in front of model instances.

Triton's (`docs/user_guide/batcher.md` of triton-inference-server/server, `src/dynamic_batch_scheduler.cc` of
triton-inference-server/core). One FIFO queue per model; when an instance is free, requests are taken in arrival order:
the largest reachable preferred batch size is sent if one can be formed; otherwise, with `maxQueueDelay` set and neither
`maxBatchSize` nor a preferred size reached, the batcher waits until the oldest request has waited that long, then sends
what it has (up to `maxBatchSize`). Without a dynamic batcher (the default scheduler) or with `maxBatchSize` 0, each
request runs alone. Past `maxQueueSize` new requests are refused (503 `Exceeds maximum queue size`).

Instances: `count` per device of each instance group (the model's placement when the group names no
GPUs). Each instance has its own CUDA stream (priority 0, as Triton creates them), so instances on
one GPU run concurrently and share its SMs through the stream scheduler (`gpu/`). An execution is:
the batch's input tensors copied to the GPU (compute_input), the forward pass (compute_infer: the
cost model's launches, then its GPU time for the batch), the outputs copied back (compute_output).
A request's element count is its `prompt` (the batch dimension it sends).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ..scenario.models import KServe, Version
from .costmodel import CostModel
from .gpu import Copy, GpuDevice, Job, copy_ns
from .gpu_memory import ReplicaMemory
from .kernel import EventHandle, Kernel
from .pool import OutOfMemoryError, Tensor
from .replica import ENGINE_DEAD, ReplicaStats
from .request import Outcome, Request
from .timeline import Timeline

QUEUE_FULL = "Exceeds maximum queue size"


@dataclass
class Duration:
    """A Triton statistics duration: how many and how long in all."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns


@dataclass
class TritonStats:
    """Triton's per-model statistics (its statistics extension and metrics: server
    `docs/protocol/extension_statistics.md`, `docs/user_guide/metrics.md`): what was served, and how long each part
    took."""

    inference_count: int = 0
    execution_count: int = 0
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    batches: dict[int, tuple[Duration, Duration, Duration]] = field(default_factory=dict)
    """Per batch size: compute_input, compute_infer, compute_output."""
    last_inference_ns: int = -1
    """Simulated time of the last completed inference (-1: none)."""
    failures: dict[str, int] = field(default_factory=dict)
    """Failed requests by Triton's reason (`docs/user_guide/metrics.md`): BACKEND (the backend died), REJECTED (the
    queue was full), CANCELED (the client went away while the request was queued)."""

    def failed(self, reason: str, ns: int) -> None:
        self.fail.add(ns)
        self.failures[reason] = self.failures.get(reason, 0) + 1


@dataclass
class _Instance:
    device: GpuDevice
    stream: str
    busy: bool = False
    priority: int = 0
    """Its stream's priority on the device (looked up once)."""


class _Execution:
    """One batch on one instance: input copy, forward pass, output copy, each step's end time recorded.
    Its bound methods are the completion callbacks (no closures per execution)."""

    __slots__ = ("batch", "copied_in", "engine", "inferred", "instance", "size", "started", "tensors", "work")

    def __init__(self, engine: TritonEngine, instance: _Instance, batch: list[Request], size: int, work: int,
                 started: int, tensors: list[Tensor]) -> None:
        self.engine = engine
        self.instance = instance
        self.batch = batch
        self.size = size
        self.work = work
        """The forward pass's launch + GPU ns."""
        self.started = started
        self.copied_in = -1
        self.inferred = -1
        self.tensors = tensors
        """What the execution allocated, freed when it ends."""

    def infer(self, _: object) -> None:
        """The inputs are on the GPU: launch the forward pass on the instance's stream."""
        engine, instance = self.engine, self.instance
        self.copied_in = engine.kernel.now
        instance.device.compute.submit(Job("infer", engine.name, instance.stream, instance.priority, self.work,
                                           self.output))

    def output(self, _: object) -> None:
        """The forward pass is done: copy the outputs back."""
        engine, instance = self.engine, self.instance
        self.inferred = engine.kernel.now
        copy_out = copy_ns(self.size * engine.output_bytes, instance.device.host_link)
        instance.device.d2h.submit(Copy("output", engine.name, instance.stream, copy_out, self.done))

    def done(self, _: object) -> None:
        self.engine._executed(self)


class TritonEngine:
    """One model version's dynamic batcher and instances."""

    def __init__(self, name: str, kernel: Kernel, timeline: Timeline, cost: CostModel, kserve: KServe,
                 version: Version, devices: dict[str, list[GpuDevice]], memory: ReplicaMemory | None = None) -> None:
        self.name = name
        self.kernel = kernel
        self.timeline = timeline
        self.cost = cost
        self.kserve = kserve
        batched = kserve.max_batch_size > 0
        self.input_bytes = sum(t.sample_bytes(batched) for t in version.inputs)
        self.output_bytes = sum(t.sample_bytes(batched) for t in version.outputs)
        self.instances = [_Instance(device, f"{name}.instance{i}")
                          for group, group_devices in zip(kserve.instance_groups, devices.values())
                          for device in group_devices for i in range(group.count)]
        for instance in self.instances:
            instance.priority = instance.device.priority(instance.stream)
        self.memory = memory
        self.queue: deque[Request] = deque()
        self.running = 0
        self.stats = ReplicaStats(keep_itl=not timeline.rolling)
        self.triton = TritonStats()
        self.on_finish: Callable[[Request], None] | None = None
        self.on_crash: Callable[[TritonEngine, str], None] | None = None
        self.dead = ""
        self._wake: EventHandle | None = None
        self._parts: dict[int, int] = {}
        """Batch size -> an execution's launch + GPU ns (the cost model is fixed for the engine's life)."""

    @property
    def outstanding(self) -> int:
        return len(self.queue) + self.running

    @property
    def pending(self) -> int:
        """Requests queued and not yet handed to an instance (`nv_inference_pending_request_count`)."""
        return len(self.queue)

    def interrupt(self) -> None:
        """Nothing to cut short: executions are not planned ahead."""

    # -- requests ----------------------------------------------------------------------------

    def submit(self, request: Request) -> None:
        if self.dead:
            request.conclude("failed", self.kernel.now, self.timeline, ENGINE_DEAD)
            return
        batching = self.kserve.dynamic_batching
        limit = batching.max_queue_size if batching is not None else None
        if limit is not None and len(self.queue) >= limit:
            self.triton.failed("REJECTED", 0)
            request.conclude("failed", self.kernel.now, self.timeline, QUEUE_FULL)
            return
        self.queue.append(request)
        self._dispatch()

    def abort(self, request: Request, outcome: Outcome = "aborted", error: str = "") -> None:
        """The client went away: a queued request leaves the queue, a failure of reason CANCELED (Triton
        checks for cancellation in its scheduler's queue); one in an execution runs to its end unseen and
        is counted as served, as Triton does for a backend that does not check for cancellation."""
        if request.done:
            return
        if request in self.queue:
            self.queue.remove(request)
            self.triton.failed("CANCELED", self.kernel.now - request.arrival)
        request.conclude(outcome, self.kernel.now, self.timeline, error)

    # -- batching ----------------------------------------------------------------------------

    def _dispatch(self) -> None:
        while self.queue:
            for instance in self.instances:
                if not instance.busy:
                    break
            else:
                return
            batch = self._form()
            if not batch:
                return
            self._execute(instance, batch)

    def _form(self) -> list[Request]:
        """The next batch (`batcher.md`), or [] to wait for more requests."""
        queue = self.queue
        batching = self.kserve.dynamic_batching
        most = self.kserve.max_batch_size
        if batching is None or most == 0:
            return [queue.popleft()]
        sizes: list[int] = []
        total = 0
        for request in queue:
            if total + request.prompt > most and sizes:
                break
            total += request.prompt
            sizes.append(total)
        preferred = [p for p in sorted(batching.preferred_batch_sizes, reverse=True) if p in sizes]
        if preferred:
            take = sizes.index(preferred[0]) + 1
        elif total >= most or len(sizes) < len(queue):
            take = len(sizes)
        else:
            waited = self.kernel.now - queue[0].arrival
            if waited < batching.max_queue_delay:
                self._sleep(queue[0].arrival + batching.max_queue_delay)
                return []
            take = len(sizes)
        return [queue.popleft() for _ in range(take)]

    def _sleep(self, until: int) -> None:
        if self._wake is None or self._wake.cancelled or self._wake.time != until:
            if self._wake is not None:
                self._wake.cancel()
            self._wake = self.kernel.at(until, self._woken)

    def _woken(self) -> None:
        self._wake = None
        self._dispatch()

    # -- executions --------------------------------------------------------------------------

    def _execute(self, instance: _Instance, batch: list[Request]) -> None:
        now = self.kernel.now
        size = 0
        for request in batch:
            size += request.prompt
        tensors = self._acquire(instance, size)
        if tensors is None:
            return
        instance.busy = True
        self.running += len(batch)
        for request in batch:
            request.scheduled_at = now
            self.timeline.add(now, "request_scheduled", request.id, self.name)
        work = self._parts.get(size)
        if work is None:
            launch, gpu = self.cost.execution_parts(size)
            work = self._parts[size] = launch + gpu
        execution = _Execution(self, instance, batch, size, work, now, tensors)
        instance.device.h2d.submit(Copy("input", self.name, instance.stream,
                                        copy_ns(size * self.input_bytes, instance.device.host_link), execution.infer))

    def _executed(self, execution: _Execution) -> None:
        now = self.kernel.now
        instance, batch, size = execution.instance, execution.batch, execution.size
        if self.memory is not None and not self.dead:
            self.memory.executed(execution.tensors)
        instance.busy = False
        self.running -= len(batch)
        started, copied_in, inferred = execution.started, execution.copied_in, execution.inferred
        compute_input, compute_infer, compute_output = copied_in - started, inferred - copied_in, now - inferred
        stats = self.triton
        stats.execution_count += 1
        stats.inference_count += size
        per_size = stats.batches.get(size)
        if per_size is None:
            per_size = stats.batches[size] = (Duration(), Duration(), Duration())
        per_size[0].add(compute_input)
        per_size[1].add(compute_infer)
        per_size[2].add(compute_output)
        self.stats.steps += 1
        self.stats.busy_ns += now - started
        for request in batch:
            if self.dead:
                if not request.done:
                    stats.failed("BACKEND", now - request.arrival)
                    request.conclude("failed", now, self.timeline, ENGINE_DEAD)
                continue
            stats.success.add(now - request.arrival)
            stats.queue.add(started - request.arrival)
            stats.compute_input.add(compute_input)
            stats.compute_infer.add(compute_infer)
            stats.compute_output.add(compute_output)
            stats.last_inference_ns = now
            if request.done:  # aborted while it ran: served, to no one
                continue
            request.computed = request.prompt
            request.conclude("completed", now, self.timeline)
            if self.on_finish is not None:
                self.on_finish(request)
        if not self.dead and self.queue:
            self._dispatch()

    def _acquire(self, instance: _Instance, size: int) -> list[Tensor] | None:
        """The execution's memory (`ReplicaMemory.execution`); None, and the model dead, when out of memory."""
        if self.memory is None:
            return []
        try:
            return self.memory.execution(instance.device.device, instance.stream, size)
        except OutOfMemoryError as error:
            self._crash(f"torch.OutOfMemoryError: {error}")
            return None

    def _crash(self, message: str) -> None:
        self.timeline.add(self.kernel.now, "oom", self.name, ",".join(i.device.device for i in self.instances), message)
        self.kill(message)

    def kill(self, reason: str) -> None:
        """The backend dies now (an out-of-memory error, an XID): queued requests fail, those in an
        execution fail when it would have ended, and the version leaves its GPUs."""
        if self.dead:
            return
        now = self.kernel.now
        self.dead = reason
        doomed = list(self.queue)
        self.queue.clear()
        for request in doomed:
            self.triton.failed("BACKEND", now - request.arrival)
            request.conclude("failed", now, self.timeline, ENGINE_DEAD)
        self.leave_gpus()
        if self.on_crash is not None:
            self.on_crash(self, reason)

    def leave_gpus(self) -> None:
        """The version is gone (unloaded or dead): free its memory and its place on the GPUs."""
        if self.memory is not None:
            self.memory.unload()
        for device in {id(i.device): i.device for i in self.instances}.values():
            device.detach(self)
