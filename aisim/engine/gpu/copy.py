"""Copy engines: host-to-device and device-to-host DMA, beside the SMs.

A GPU has one copy engine per direction here (`asyncEngineCount` = 2 on data-centre parts). Each
runs its copies one at a time in launch order; stream priorities do not apply to copies
(CUDA Programming Guide, streams). A copy costs a fixed latency plus bytes over the PCIe
bandwidth of its direction; pageable host memory goes through the driver's staging buffer at a
fraction of that (no authoritative modern figure: the ratio is a parameter, 0.5 by default). Copies overlap with
kernels: they occupy the copy engine, not the SMs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from ..kernel import Kernel
from ..timeline import Timeline

COPY_LATENCY_NS = 8_000
"""Per-copy latency (about 5-10 us per `cudaMemcpy` call; unverified)."""
PAGEABLE_FACTOR = 0.5
"""Pageable over pinned bandwidth (roughly half to 0.8x in published measurements; unverified)."""


def copy_ns(size: int, bandwidth: float, pinned: bool = True, pageable_factor: float = PAGEABLE_FACTOR) -> int:
    """How long a copy of `size` bytes takes at `bandwidth` bytes/s."""
    rate = bandwidth if pinned else bandwidth * pageable_factor
    return COPY_LATENCY_NS + int(size * 1e9 / rate)


class Copy:
    """One copy: `duration` ns on its engine once it starts."""

    __slots__ = ("duration", "name", "on_done", "owner", "started", "stream")

    def __init__(self, name: str, owner: str, stream: str, duration: int, on_done: Callable[[Copy], None]) -> None:
        self.name = name
        self.owner = owner
        self.stream = stream
        self.duration = duration
        self.on_done = on_done
        self.started = -1


class CopyEngine:
    """One DMA direction of one GPU: copies in launch order."""

    def __init__(self, kernel: Kernel, device: str, direction: str, timeline: Timeline) -> None:
        self.kernel = kernel
        self.device = device
        self.direction = direction
        self.timeline = timeline
        self.queue: deque[Copy] = deque()
        self.busy_ns = 0
        self.copies = 0
        """Copies finished (with `busy_ns`, what telemetry turns into PCIe bytes)."""

    def submit(self, copy: Copy) -> None:
        self.queue.append(copy)
        if len(self.queue) == 1:
            self._start()

    def _start(self) -> None:
        copy = self.queue[0]
        copy.started = self.kernel.now
        self.kernel.after(copy.duration, self._done)

    def _done(self) -> None:
        copy = self.queue.popleft()
        self.busy_ns += copy.duration
        self.copies += 1
        self.timeline.add(self.kernel.now, "copy", self.device, self.direction, copy.stream, copy.owner, copy.name,
                          copy.started)
        if self.queue:
            self._start()
        copy.on_done(copy)

    def moved_bytes(self, now: int, bandwidth: float) -> float:
        """Bytes moved up to `now` at `bandwidth` bytes/s: each copy's time less its fixed latency (the
        inverse of `copy_ns` for pinned copies), the running copy pro rata."""
        busy = self.busy_ns - self.copies * COPY_LATENCY_NS
        if self.queue and self.queue[0].started >= 0:
            running = self.queue[0]
            busy += max(0, min(now - running.started, running.duration) - COPY_LATENCY_NS)
        return max(busy, 0) * bandwidth / 1e9
