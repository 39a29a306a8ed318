"""The event loop of a snapshot replay: one recorded device trace fed to one allocator model.

`replay.py` describes the mapping from trace actions to model calls and assembles the result; this
module does the work, event by event, and keeps the figures: the recorded reserved memory, the
model's OOMs, the sampled series and the first divergence. Two things need care:

- **Two-phase frees.** A `free_requested` directly followed by its `free_completed` is a plain free.
  Otherwise (`record_stream`) the block is freed with a use on a private pseudo-stream (negative
  ids, reused) that completes at the `free_completed`, so the model cannot reuse it earlier either.
- **Segment frees.** A run of `segment_free` / `segment_unmap` is either the recorded allocator's
  retry after a failed `cudaMalloc` (an `oom` follows, or a segment that did not fit next to the
  recorded reserved memory) or a user's `torch.cuda.empty_cache()`; the model empties its cache for
  the latter and decides for itself in the former. The `free_completed`s a retry's synchronize
  records come after the failed cache search, so the model gets those blocks back only in its own
  retry (or after the allocation), not before its search.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import Allocation, Allocator
from .oom import OutOfMemoryError
from .snapshot import TraceEvent

SEGMENT_GROW = frozenset(("segment_alloc", "segment_map"))
SEGMENT_SHRINK = frozenset(("segment_free", "segment_unmap"))


@dataclass(frozen=True, slots=True)
class Sample:
    """The model's pool after trace event `event` (-1: after the initial allocations)."""

    event: int
    time_us: int | None
    reserved: int
    allocated: int
    fragmentation: float
    """(reserved - allocated) / reserved."""
    inactive_split: int
    recorded_reserved: int


@dataclass(frozen=True, slots=True)
class ModelOom:
    """An allocation the model could not make."""

    event: int
    """Trace index; -1 for an allocation alive before the trace started."""
    time_us: int | None
    size: int
    stream: int
    message: str
    recorded: bool
    """Whether the recorded allocator ran out of memory here too (an `oom` entry)."""


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first event after which model and recorded reserved memory differ by more than the tolerance."""

    event: int
    time_us: int | None
    action: str
    reserved: int
    recorded_reserved: int


class Replayer:
    """Feeds one trace to one model; read the figures from the attributes after `run()`."""

    def __init__(self, pool: Allocator, trace: tuple[TraceEvent, ...], capacity: int, start_reserved: int,
                 every: int, tolerance: int) -> None:
        self.pool = pool
        self.trace = trace
        self.capacity = capacity
        self.every = every
        self.tolerance = tolerance
        self.recorded_reserved = self.recorded_peak = start_reserved
        self.live: dict[int, Allocation] = {}
        self.skipped: set[int] = set()
        """Addresses whose allocation the model could not make, not yet freed."""
        self.skipped_freeing: set[int] = set()
        self.awaiting: dict[int, int] = {}
        """Address -> pseudo-stream of a block freed with `record_stream` semantics."""
        self.held: list[int] = []
        self.spare_streams: list[int] = []
        self.next_stream = -(1 << 62)
        self.consumed = self.run_end = -1
        self.user_call = False
        self.actions: dict[str, int] = {}
        self.ooms: list[ModelOom] = []
        self.samples: list[Sample] = []
        self.first: Divergence | None = None
        self.max_difference = 0
        self.recorded_ooms = self.served = self.empty_cache_calls = 0
        self.recorded_segment_allocs = self.recorded_segment_frees = 0
        self.skipped_frees = self.inconsistent = 0

    # setup

    def allocate_initial(self, initial: dict[int, tuple[int, int]]) -> None:
        """Allocate, in address order, what was alive before the trace started."""
        for addr, (size, stream) in initial.items():
            block = self._malloc(-1, size, stream, None, False)
            if block is None:
                self.skipped.add(addr)
            else:
                self.live[addr] = block
        self._sample(-1, None)

    # the loop

    def run(self) -> None:
        handlers = {
            "alloc": self._alloc,
            "free_requested": self._free_requested,
            "free": self._free_requested,
            "free_completed": self._free_completed,
            "segment_alloc": self._segment_grow,
            "segment_map": self._segment_grow,
            "segment_free": self._segment_shrink,
            "segment_unmap": self._segment_shrink,
            "oom": self._oom,
        }
        actions = self.actions
        reserved = self.pool.stats.reserved_bytes[0]
        every, last = self.every, len(self.trace) - 1
        for i, event in enumerate(self.trace):
            action = event[0]
            actions[action] = actions.get(action, 0) + 1
            handler = handlers.get(action)
            compare = handler(i, event) if handler is not None else False
            if self.held and (action == "alloc" or action == "oom"):
                self._release_held()
            if compare:
                difference = abs(reserved.current - self.recorded_reserved)
                if difference > self.max_difference:
                    self.max_difference = difference
                    if difference > self.tolerance and self.first is None:
                        self.first = Divergence(i, event[4], action, reserved.current, self.recorded_reserved)
            if i % every == every - 1 or i == last:
                self._sample(i, event[4])

    # handlers: each returns whether model and recorded reserved memory are comparable afterwards

    def _alloc(self, i: int, event: TraceEvent) -> bool:
        _, addr, size, stream, time_us = event
        if addr in self.live:  # its free is missing from the trace
            self.inconsistent += 1
            self.pool.free(self.live.pop(addr))
        elif addr in self.skipped or addr in self.skipped_freeing:
            self.inconsistent += 1
            self.skipped.discard(addr)
            self.skipped_freeing.discard(addr)
        block = self._malloc(i, size, stream, time_us, False)
        if block is None:
            self.skipped.add(addr)
        else:
            self.live[addr] = block
        return True

    def _free_requested(self, i: int, event: TraceEvent) -> bool:
        action, addr = event[0], event[1]
        trace = self.trace
        paired = action == "free" or (i + 1 < len(trace) and trace[i + 1][0] == "free_completed" and trace[i + 1][1] == addr)
        if paired and action != "free":
            self.consumed = i + 1
        block = self.live.pop(addr, None)
        if block is None:
            if addr in self.skipped:
                self.skipped.discard(addr)
                self.skipped_frees += 1
                if not paired:
                    self.skipped_freeing.add(addr)
            else:
                self.inconsistent += 1
        elif paired:
            self.pool.free(block)
        else:
            pseudo = self.spare_streams.pop() if self.spare_streams else self._new_stream()
            self.pool.free(block, uses=(pseudo,))
            self.awaiting[addr] = pseudo
        return True

    def _free_completed(self, i: int, event: TraceEvent) -> bool:
        addr = event[1]
        if i == self.consumed:
            return False
        pseudo = self.awaiting.pop(addr, None)
        if pseudo is not None:
            in_retry = not self.user_call if i <= self.run_end else self._synchronized_by_retry(i)
            if in_retry:
                self.held.append(pseudo)
                return False
            self.pool.stream_done(pseudo)
            self.pool.process_events()
            self.spare_streams.append(pseudo)
            return True
        block = self.live.pop(addr, None)
        if block is not None:  # its free_requested fell before the ring buffer
            self.pool.free(block)
        elif addr in self.skipped_freeing:
            self.skipped_freeing.discard(addr)
        elif addr in self.skipped:
            self.skipped.discard(addr)
            self.skipped_frees += 1
        else:
            self.inconsistent += 1
        return True

    def _segment_grow(self, i: int, event: TraceEvent) -> bool:
        self.recorded_reserved += event[2]
        self.recorded_peak = max(self.recorded_peak, self.recorded_reserved)
        self.recorded_segment_allocs += 1
        return False

    def _segment_shrink(self, i: int, event: TraceEvent) -> bool:
        trace = self.trace
        if i > self.run_end:
            self.run_end = self._past_flush(i) - 1
            self.user_call = not self._retry_flush(i, self.recorded_reserved)
            if self.user_call:
                self.pool.empty_cache()
                self.empty_cache_calls += 1
        self.recorded_reserved -= event[2]
        self.recorded_segment_frees += 1
        return self.user_call and (i + 1 == len(trace) or trace[i + 1][0] not in SEGMENT_SHRINK)

    def _oom(self, i: int, event: TraceEvent) -> bool:
        self.recorded_ooms += 1
        block = self._malloc(i, event[2], event[3], event[4], True)
        if block is not None:
            self.served += 1
            self.pool.free(block)
        return True

    # helpers

    def _malloc(self, event: int, size: int, stream: int, time_us: int | None, recorded_oom: bool) -> Allocation | None:
        try:
            return self.pool.malloc(size, stream)
        except OutOfMemoryError as error:
            self.ooms.append(ModelOom(event, time_us, size, stream, error.message, recorded_oom))
            return None

    def _new_stream(self) -> int:
        stream = self.next_stream
        self.next_stream += 1
        return stream

    def _release_held(self) -> None:
        """Complete the frees a retry's synchronize returned, once the allocation that retried is done."""
        for pseudo in self.held:
            self.pool.stream_done(pseudo)
        self.pool.process_events()
        self.spare_streams += self.held
        self.held = []

    def _sample(self, event: int, time_us: int | None) -> None:
        stats = self.pool.stats
        reserved = stats.reserved_bytes[0].current
        allocated = stats.allocated_bytes[0].current
        fragmentation = round((reserved - allocated) / reserved, 6) if reserved else 0.0
        inactive_split = stats.inactive_split_bytes[0].current
        self.samples.append(Sample(event, time_us, reserved, allocated, fragmentation, inactive_split, self.recorded_reserved))

    def _past_flush(self, i: int) -> int:
        """The index after the run of segment frees (and the `free_completed`s a synchronize mixes in) at `i`."""
        trace, n = self.trace, len(self.trace)
        while i < n and (trace[i][0] in SEGMENT_SHRINK or trace[i][0] == "free_completed"):
            i += 1
        return i

    def _retry_flush(self, i: int, reserved: int) -> bool:
        """Whether the segment frees from `i` on are the recorded allocator's retry after a failed `cudaMalloc`.

        They are when an `oom` follows, or a new segment that did not fit next to `reserved` (the
        recorded reserved memory before them) in the capacity. Otherwise they are `empty_cache()`.
        Both release the same segments, so a wrong guess costs little.
        """
        j = self._past_flush(i)
        if j == len(self.trace):
            return False
        action, _, size = self.trace[j][:3]
        return action == "oom" or (action in SEGMENT_GROW and reserved + size > self.capacity)

    def _synchronized_by_retry(self, i: int) -> bool:
        """Whether the `free_completed` at `i` comes from the synchronize of a failed malloc's retry."""
        j = self._past_flush(i + 1)
        if j < len(self.trace) and self.trace[j][0] == "oom":
            return True
        flushed = any(self.trace[k][0] in SEGMENT_SHRINK for k in range(i + 1, j))
        return flushed and self._retry_flush(i + 1, self.recorded_reserved)
