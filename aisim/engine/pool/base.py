"""The interface every simulated allocator shares, and the stream-ordered free they all honour.

    pool = make_allocator(gpu.memory_pool, capacity=profile.capacity)
    a = pool.malloc(3 * MiB, stream=0)     # an Allocation: address, size, requested_size, stream
    pool.free(a)                           # reusable at once on its stream
    b = pool.malloc(1 * MiB, stream=0)
    pool.free(b, uses=(7,))                # stream 7 still reads it: record_stream semantics
    pool.stream_done(7)                    # stream 7 finished the work queued so far
    pool.process_events()                  # now b is back in the pool (also done by the next malloc)
    pool.memory_stats()["allocated_bytes.all.current"]
    pool.state()                           # PoolState: fragmentation, bins, memory map

Stream-ordered frees follow PyTorch (`recordStream`, `insert_events`, `process_events`): a block
used on streams other than its own is not reusable until the work those streams had queued when it
was freed has finished. `free()` drops `allocation` and `allocated_bytes` at once and records one
event per using stream; the block stays *active* (PyTorch's `active_awaiting_free`) until every event
has completed and `process_events()` (run at the start of each `malloc`) or `synchronize()` (run by
`empty_cache()` and the out-of-memory retry) returns it. The simulator has no GPU, so the engine
says when a stream's work is done with `stream_done(stream)`.

Handles are the allocator's own records; after `free` a handle must not be used again (the caching
allocator recycles the object for merged and reused blocks, as PyTorch recycles `Block*`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from .device import SimulatedDevice
from .oom import OutOfMemoryError, oom_message
from .state import BinCounter, PoolState, SegmentView, external_fragmentation, ratio
from .stats import DeviceStats
from .thresholds import LEVELS, ThresholdEvent, ThresholdWatch

if TYPE_CHECKING:
    from .round_trip import Shape, Trip


class Allocation:
    """A block handed out by `malloc`: where it is, how big, for whom."""

    __slots__ = ("address", "allocated", "event_count", "requested_size", "size", "stream", "stream_uses", "tag")

    def __init__(self, address: int, size: int, requested_size: int, stream: int) -> None:
        self.address = address
        """Simulated device address (deterministic)."""
        self.size = size
        """Bytes the block occupies (rounded; PyTorch's `allocated_bytes` counts these)."""
        self.requested_size = requested_size
        """Bytes the caller asked for."""
        self.stream = stream
        """The stream it was allocated on."""
        self.allocated = False
        self.event_count = 0
        self.stream_uses: set[int] | None = None
        self.tag = ""
        """What the memory holds while allocated (`Tensor` sets it; a free clears it)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(address={self.address:#x}, size={self.size}, stream={self.stream})"


class Allocator(ABC):
    """A GPU memory pool: malloc and free of device memory on streams, statistics and state."""

    kind: ClassVar[str]
    pool_split: ClassVar[bool] = False

    def __init__(
        self,
        device: SimulatedDevice,
        *,
        warning: float = 0.85,
        critical: float = 0.92,
        clock: Callable[[], int] | None = None,
        max_split_size: int = -1,
    ) -> None:
        self.device = device
        self.stats = DeviceStats(self.pool_split, max_split_size)
        self.ops = 0
        """Mallocs and frees so far (threshold events carry it)."""
        self.watch = ThresholdWatch(device.capacity, warning, critical, clock)
        self._warn_at, self._crit_at = self.watch.limits(device.outside)
        self._pending: dict[int, deque[tuple[int, Allocation]]] = {}
        self._recorded: dict[int, int] = {}
        self._completed: dict[int, int] = {}
        self.version = 0
        """Bumped by every change of the pool (what a kept round trip's base is checked by, `deferred.py`)."""
        self._deferred: tuple[Any, Shape, Trip] | None = None
        """A step's round trip not allocated yet: (its owner, its tensors' tags and sizes, the trip)."""

    # deferred round trips (`deferred.py`)

    def can_defer(self) -> bool:
        """Whether a step's round trip may be deferred now (the caching allocator's plain case only)."""
        return False

    def defer(self, owner: Any, eager: Shape, trip: Trip) -> None:
        """Allocate nothing for the step now: `owner.materialize(self, eager)` does it if anyone looks."""
        self._deferred = (owner, eager, trip)

    def complete_deferred(self, owner: Any) -> bool:
        """`owner`'s deferred step ended unseen: its round trip's counter changes, as if it had run. False when it
        is not deferred any more (somebody settled it; another replica's step may be deferred now instead)."""
        deferred = self._deferred
        if deferred is None or deferred[0] is not owner:
            return False
        self._deferred = None
        deferred[2].apply(self)  # type: ignore[arg-type]
        return True

    def _settle(self) -> None:
        """Somebody reads or changes the pool: allocate the deferred step's tensors for real first."""
        if self._deferred is not None:
            owner, eager, _ = self._deferred
            self._deferred = None
            owner.materialize(self, eager)

    # the allocator proper

    @abstractmethod
    def malloc(self, size: int, stream: int = 0) -> Allocation:
        """A block of at least `size` bytes usable on `stream`; raises `OutOfMemoryError`."""

    @abstractmethod
    def empty_cache(self) -> None:
        """Wait for pending stream uses and give every wholly free segment back to the device."""

    @abstractmethod
    def state(self) -> PoolState:
        """A snapshot for the memory map, histograms and fragmentation metrics."""

    @abstractmethod
    def _free_requested(self, block: Allocation) -> None:
        """First half of a free: the block stops counting as allocated."""

    @abstractmethod
    def _free_block(self, block: Allocation) -> None:
        """Second half: the block returns to the pool (merging, caching) and stops being active."""

    def free(self, block: Allocation, uses: Iterable[int] = ()) -> None:
        """Give a block back; `uses` names other streams still using it (`record_stream`)."""
        if self._deferred is not None:
            self._settle()
        self.version += 1
        if not block.allocated:
            raise ValueError(f"free of a block that is not allocated: {block!r}")
        block.allocated = False
        block.tag = ""
        if not block.size:
            return
        self.ops += 1
        for stream in uses:
            if stream != block.stream:
                if block.stream_uses is None:
                    block.stream_uses = {stream}
                else:
                    block.stream_uses.add(stream)
        self._free_requested(block)
        if block.stream_uses:
            self._insert_events(block)
        else:
            self._free_block(block)
        self._check_level()

    def record_stream(self, block: Allocation, stream: int) -> None:
        """`Tensor.record_stream`: `stream` uses the block; a use on its own stream is ignored."""
        if self._deferred is not None:
            self._settle()
        if stream != block.stream:
            if block.stream_uses is None:
                block.stream_uses = {stream}
            else:
                block.stream_uses.add(stream)

    # stream-ordered frees

    def stream_done(self, stream: int) -> None:
        """The work queued on `stream` so far has finished: its recorded events are complete."""
        if self._deferred is not None:
            self._settle()
        self.version += 1
        self._completed[stream] = self._recorded.get(stream, 0)

    def process_events(self) -> None:
        """Return the blocks whose every event has completed (PyTorch's `process_events`)."""
        for stream in list(self._pending):
            queue = self._pending[stream]
            done = self._completed.get(stream, 0)
            while queue and queue[0][0] < done:
                block = queue.popleft()[1]
                block.event_count -= 1
                if block.event_count == 0:
                    self._free_block(block)
            if not queue:
                del self._pending[stream]

    def synchronize(self) -> None:
        """Wait for every stream and return every block awaiting free (`synchronize_and_free_events`)."""
        if self._deferred is not None:
            self._settle()
        self.version += 1
        self.stats.num_sync_all_streams += 1
        for stream, count in self._recorded.items():
            self._completed[stream] = count
        self.process_events()

    def pending_frees(self) -> int:
        """Blocks freed but still awaiting other streams."""
        if self._deferred is not None:
            self._settle()
        return len({id(block) for queue in self._pending.values() for _, block in queue})

    def _insert_events(self, block: Allocation) -> None:
        streams = sorted(block.stream_uses or ())
        block.stream_uses = None
        for stream in streams:
            seq = self._recorded.get(stream, 0)
            self._recorded[stream] = seq + 1
            self._pending.setdefault(stream, deque()).append((seq, block))
            block.event_count += 1

    # statistics and device

    def memory_stats(self) -> dict[str, int]:
        """`torch.cuda.memory_stats()`: flattened keys, sorted."""
        if self._deferred is not None:
            self._settle()
        return self.stats.as_dict()

    def memory_allocated(self) -> int:
        if self._deferred is not None:
            self._settle()
        return self.stats.allocated_bytes[0].current

    def memory_reserved(self) -> int:
        if self._deferred is not None:
            self._settle()
        return self.stats.reserved_bytes[0].current

    def reset_peak_memory_stats(self) -> None:
        if self._deferred is not None:
            self._settle()
        self.version += 1
        self.stats.reset_peak()

    def reset_accumulated_memory_stats(self) -> None:
        if self._deferred is not None:
            self._settle()
        self.version += 1
        self.stats.reset_accumulated()

    def mem_get_info(self) -> tuple[int, int]:
        """`torch.cuda.mem_get_info()`: (free, total) of the device."""
        if self._deferred is not None:
            self._settle()
        return self.device.mem_get_info()

    @property
    def capacity(self) -> int:
        return self.device.capacity

    def set_other_process(self, pid: int, used: int) -> None:
        """Another process on this GPU now holds `used` bytes (0 removes it)."""
        if self._deferred is not None:
            self._settle()
        if used:
            self.device.other_processes[pid] = used
        else:
            self.device.other_processes.pop(pid, None)
        self._outside_changed()

    def set_non_pytorch(self, used: int) -> None:
        """This process's memory outside the pool (CUDA context, NCCL, cuBLAS workspaces)."""
        if self._deferred is not None:
            self._settle()
        self.device.non_pytorch = used
        self._outside_changed()

    def _outside_changed(self) -> None:
        self.version += 1
        outside = self.device.outside
        self._warn_at, self._crit_at = self.watch.limits(outside)
        self.watch.update(self.stats.allocated_bytes[0].current, outside, self.ops)

    # threshold events

    @property
    def events(self) -> list[ThresholdEvent]:
        """Threshold events recorded and not yet drained."""
        if self._deferred is not None:
            self._settle()
        return self.watch.events

    def drain_events(self) -> list[ThresholdEvent]:
        """The threshold events since the last call, oldest first."""
        if self._deferred is not None:
            self._settle()
        events, self.watch.events = self.watch.events, []
        return events

    def _check_level(self) -> None:
        """Record a threshold event when allocated memory moved to another level (after a malloc or a free)."""
        allocated = self.stats.allocated_bytes[0].current
        if self.level_of(allocated) != self.watch.level:
            self.watch.update(allocated, self.device.outside, self.ops)

    def level_of(self, allocated: int) -> int:
        """The usage level (0 normal, 1 warning, 2 critical) of `allocated` bytes in this pool."""
        return 2 if allocated > self._crit_at else 1 if allocated > self._warn_at else 0

    def _out_of_memory(self, requested: int, size: int, alloc_size: int, stream: int,
                       allowed: int | None = None) -> OutOfMemoryError:
        """Count an OOM and build PyTorch's error for a request of `requested` bytes that needed
        `size` (`alloc_size` from the device); `allowed` is the per-process fraction's limit."""
        self.stats.num_ooms += 1
        device_free, total = self.device.mem_get_info()
        allocated = self.stats.allocated_bytes[0].current
        reserved = self.stats.reserved_bytes[0].current
        message = oom_message(alloc_size=alloc_size, device=self.device.index, total=total, device_free=device_free,
                              allocated=allocated, reserved=reserved, processes=self.device.processes(),
                              allowed=allowed)
        return OutOfMemoryError(message, requested=requested, size=size, alloc_size=alloc_size, stream=stream,
                                device=self.device.index, device_free=device_free, allocated=allocated,
                                reserved=reserved)

    def _summary(self, segments: tuple[SegmentView, ...], bins: BinCounter, largest: int, cached: int,
                 reserved: int | None = None) -> PoolState:
        """The pool's state from its memory map (`reserved`: the pool's own count when None)."""
        stats = self.stats
        reserved = stats.reserved_bytes[0].current if reserved is None else reserved
        allocated = stats.allocated_bytes[0].current
        outside = self.device.outside
        return PoolState(
            allocator=self.kind,
            device=self.device.index,
            capacity=self.device.capacity,
            held_outside=outside,
            reserved=reserved,
            allocated=allocated,
            requested=stats.requested_bytes[0].current,
            active=stats.active_bytes[0].current,
            cached=cached,
            free=self.device.free_bytes(),
            usage=ratio(allocated + outside, self.device.capacity),
            level=LEVELS[self.watch.level],
            fragmentation=ratio(reserved - allocated, reserved),
            external_fragmentation=external_fragmentation(largest, cached),
            inactive_split=stats.inactive_split_bytes[0].current,
            largest_free_block=largest,
            bins=bins.bins(),
            segments=segments,
        )

    def _null(self, stream: int) -> Allocation:
        """A zero-byte request: PyTorch hands out a null pointer and counts nothing."""
        block = Allocation(0, 0, 0, stream)
        block.allocated = True
        return block
