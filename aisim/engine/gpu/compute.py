"""One GPU's SMs shared by the kernels of its streams: priorities, preemption at block boundaries.

The model (CUDA Programming Guide, streams and `cudaStreamCreateWithPriority`):

- The block scheduler places thread blocks on free SM slots. Kernels of streams with the same
  priority interleave block by block, so they share the SMs: each of n such kernels progresses at
  1/n of its solo speed (processor sharing). A kernel's solo duration is its `work`.
- A higher-priority stream's blocks are placed first. When its kernel arrives while lower-priority
  kernels run, the lower kernels are not interrupted: their resident blocks run to completion and
  no new ones start. That drain is the context switch (`preemption.contextSwitch`): the lower
  kernels keep progressing during it, the higher kernel starts after it, and the lower kernels
  resume when no higher-priority work is left. Nothing is preempted mid-block.
- `preemption.waitThreshold`: a higher-priority kernel first waits this long; if the lower work is
  still running then, it preempts. `preemption.maxPerSecond` caps preemptions in any one-second
  window; past the cap, the higher kernel waits for a kernel boundary: for the running kernels to
  end.
- Stream priorities follow CUDA: lower numbers run first, 0 is the lowest.

Copies do not go through here: copy engines ignore stream priorities (`copy.py`).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable

from ..kernel import URGENT, EventHandle, Kernel
from ..timeline import Timeline

NS = 1_000_000_000


class Job:
    """A kernel on a stream: `work` ns on an otherwise idle GPU."""

    __slots__ = ("arrived", "dram", "name", "on_done", "owner", "priority", "remaining", "seq", "started", "stream",
                 "tensor", "work")

    def __init__(self, name: str, owner: str, stream: str, priority: int, work: int,
                 on_done: Callable[[Job], None], tensor: float = 0.0, dram: float = 0.0) -> None:
        self.name = name
        self.owner = owner
        """Who launched it (a replica), for the timeline."""
        self.stream = stream
        self.priority = priority
        self.work = work
        self.remaining = float(work)
        self.on_done = on_done
        self.seq = 0
        self.arrived = -1
        self.started = -1
        """When it first got SM time (-1 until then)."""
        self.tensor = tensor
        """Share of its running time the tensor pipe is busy at peak (telemetry; 0 when not metered)."""
        self.dram = dram
        """Share of its running time the memory interface is busy at peak bandwidth (telemetry)."""


class StreamStats:
    """What a stream's kernels got: how many, their solo time, their time from launch to end."""

    __slots__ = ("kernels", "waited_ns", "wall_ns", "work_ns")

    def __init__(self) -> None:
        self.kernels = 0
        self.work_ns = 0
        self.wall_ns = 0
        self.waited_ns = 0

    def add(self, job: Job, end: int) -> None:
        self.kernels += 1
        self.work_ns += job.work
        self.wall_ns += end - job.arrived
        self.waited_ns += job.started - job.arrived


class ComputeEngine:
    """The SMs of one GPU device (see the module docstring)."""

    def __init__(self, kernel: Kernel, device: str, timeline: Timeline, context_switch_ns: int = 10_000,
                 wait_threshold_ns: int = 0, max_per_second: int | None = None) -> None:
        self.kernel = kernel
        self.device = device
        self.timeline = timeline
        self.context_switch_ns = context_switch_ns
        self.wait_threshold_ns = wait_threshold_ns
        self.max_per_second = max_per_second
        self.active: list[Job] = []
        """Kernels progressing now, all of one priority."""
        self.waiting: list[tuple[int, int, Job]] = []
        """(priority, sequence, job): queued and suspended kernels."""
        self.preemptions: deque[int] = deque()
        """Times of recent preemptions (for the per-second cap)."""
        self.preempted = 0
        self.switching: EventHandle | None = None
        self._updated = 0
        self._next: EventHandle | None = None
        self._seq = 0
        self.busy_ns = 0
        """Time with at least one kernel progressing."""
        self.tensor_ns = 0.0
        """Tensor-pipe time at peak of the kernels so far (their `tensor` share of the time they got)."""
        self.dram_ns = 0.0
        """Memory-interface time at peak bandwidth of the kernels so far."""
        self.streams: dict[str, StreamStats] = {}

    def busy_at(self, now: int) -> int:
        """Time with a kernel progressing, up to `now` (the kernel running at `now` included)."""
        return self.busy_ns + (max(0, now - self._updated) if self.active else 0)

    @property
    def level(self) -> int | None:
        """Priority of the kernels running now (None when idle)."""
        return self.active[0].priority if self.active else None

    def submit(self, job: Job) -> None:
        """A kernel is launched now on its stream."""
        now = self.kernel.now
        self._advance(now)
        job.arrived = now
        job.seq = self._seq
        self._seq += 1
        if not self.active and self.switching is None:
            self._activate([job])
        elif self.switching is None and job.priority == self.level:
            self._activate([job])  # same priority: its blocks interleave with the running kernels'
        else:
            heapq.heappush(self.waiting, (job.priority, job.seq, job))
            if self.wait_threshold_ns and self.level is not None and job.priority < self.level:
                self.kernel.after(self.wait_threshold_ns, self._consider, URGENT)
            self._consider()
        self._plan()

    # -- scheduling ------------------------------------------------------------------------

    def _consider(self) -> None:
        """Start a preemption if a waiting kernel outranks the running ones and may preempt now."""
        if self.switching is not None or not self.waiting or not self.active:
            return
        priority, _, head = self.waiting[0]
        level = self.level
        assert level is not None
        if priority >= level:
            return
        now = self.kernel.now
        if now - head.arrived < self.wait_threshold_ns:
            return  # its own threshold event comes back later
        window = self.preemptions
        while window and window[0] <= now - NS:
            window.popleft()
        if self.max_per_second is not None and len(window) >= self.max_per_second:
            return  # capped: it waits for the running kernels to end
        window.append(now)
        self.preempted += 1
        lower = ",".join(sorted({j.stream for j in self.active}))
        self.timeline.add(now, "preemption", self.device, lower, head.stream, self.context_switch_ns)
        self.switching = self.kernel.after(self.context_switch_ns, self._switched, URGENT)

    def _switched(self) -> None:
        """The lower kernels' resident blocks have drained: they wait, the higher kernels run."""
        self._advance(self.kernel.now)
        self.switching = None
        for job in self.active:
            heapq.heappush(self.waiting, (job.priority, job.seq, job))
        self.active = []
        self._dispatch()
        self._plan()

    def _dispatch(self) -> None:
        """Run every waiting kernel of the highest waiting priority."""
        if not self.waiting:
            return
        top = self.waiting[0][0]
        chosen = []
        while self.waiting and self.waiting[0][0] == top:
            chosen.append(heapq.heappop(self.waiting)[2])
        self._activate(chosen)

    def _activate(self, jobs: list[Job]) -> None:
        now = self.kernel.now
        for job in jobs:
            if job.started < 0:
                job.started = now
        self.active.extend(jobs)

    # -- progress --------------------------------------------------------------------------

    def _advance(self, now: int) -> None:
        """Credit the running kernels with the time since the last change."""
        elapsed = now - self._updated
        self._updated = now
        if elapsed <= 0 or not self.active:
            return
        self.busy_ns += elapsed
        share = elapsed / len(self.active)
        for job in self.active:
            job.remaining -= share
            if job.tensor or job.dram:
                self.tensor_ns += share * job.tensor
                self.dram_ns += share * job.dram

    def activity(self, now: int) -> tuple[float, float, float]:
        """(busy, tensor, dram) ns up to `now`, counting the kernels running now; changes nothing, so that
        reading it (a telemetry sample) cannot change the run."""
        busy, tensor, dram = float(self.busy_ns), self.tensor_ns, self.dram_ns
        elapsed = now - self._updated
        if elapsed > 0 and self.active:
            busy += elapsed
            share = elapsed / len(self.active)
            tensor += share * sum(job.tensor for job in self.active)
            dram += share * sum(job.dram for job in self.active)
        return busy, tensor, dram

    def _plan(self) -> None:
        """Schedule the next kernel completion."""
        if self._next is not None:
            self._next.cancel()
            self._next = None
        if not self.active:
            return
        active = self.active
        first = active[0].remaining if len(active) == 1 else min(job.remaining for job in active)
        delay = max(0, math.ceil(first * len(active) - 1e-6))
        self._next = self.kernel.at(self._updated + delay, self._complete)

    def _complete(self) -> None:
        now = self.kernel.now
        self._advance(now)
        self._next = None
        limit = 1e-6 * len(self.active)
        done: list[Job] = []
        left: list[Job] = []
        for job in self.active:
            (done if job.remaining <= limit else left).append(job)
        self.active = left
        if not self.active:
            if self.switching is not None:  # the kernels being drained finished first
                self.switching.cancel()
                self.switching = None
            self._dispatch()
        else:
            self._consider()
        self._plan()
        for job in done:
            self.timeline.add(now, "kernel", self.device, job.stream, job.owner, job.name, job.started, job.work)
            stream = self.streams.get(job.stream)
            if stream is None:
                stream = self.streams[job.stream] = StreamStats()
            stream.add(job, now)
            job.on_done(job)
