"""A tensor's life in a pool: Created -> Computed -> Referenced -> Freed, with stream-ordered frees.

PyTorch frees a tensor's block when its last Python reference goes, but the block is reusable only
after the work queued on it is done. On the tensor's own stream that is automatic (later work on
the stream runs after), so the block returns to the pool at once. A tensor that another stream
reads must be recorded on that stream (`Tensor.record_stream`); its free then waits for an event
on each such stream (`Allocator.stream_done` / `process_events`), as `CUDACachingAllocator.cpp` does. The states make
the order explicit and refuse what cannot happen, such as reading a tensor no kernel has written
or freeing one twice. `tag` says what the memory holds (weights, KV cache, activations, CUDA graph
pool, workspace), for the memory map and the report.
"""

from __future__ import annotations

from enum import StrEnum

from .base import Allocation, Allocator


class TensorState(StrEnum):
    CREATED = "CREATED"
    """Memory allocated; no kernel has written it yet."""
    COMPUTED = "COMPUTED"
    """The kernel that produces it has run."""
    REFERENCED = "REFERENCED"
    """Read by kernels on other streams (their uses are recorded)."""
    FREED = "FREED"
    """Handed back; reusable once the recorded streams have done their work."""


class TensorStateError(RuntimeError):
    """A tensor was used out of order (read before written, used or freed after its free)."""


class Tensor:
    """One tensor's block in a pool, and where it is in its life."""

    __slots__ = ("block", "pool", "state", "tag")

    def __init__(self, pool: Allocator, size: int, tag: str, stream: int = 0) -> None:
        self.pool = pool
        self.block: Allocation = pool.malloc(size, stream)
        """The pool's block (raises `OutOfMemoryError` when it cannot be served)."""
        self.block.tag = tag
        self.tag = tag
        self.state = TensorState.CREATED

    def computed(self) -> Tensor:
        """Its producing kernel has run on the tensor's stream."""
        if self.state is not TensorState.CREATED:
            self._expect(TensorState.CREATED, "computed")  # raises
        self.state = TensorState.COMPUTED
        return self

    def record_stream(self, stream: int) -> None:
        """A kernel on `stream` reads it; its free will wait for that stream's work."""
        self._expect((TensorState.COMPUTED, TensorState.REFERENCED), f"read on stream {stream}")
        self.pool.record_stream(self.block, stream)
        if stream != self.block.stream:
            self.state = TensorState.REFERENCED

    def free(self) -> None:
        """Drop it: the block returns now, or after the streams that read it are done."""
        if self.state is TensorState.FREED:
            raise TensorStateError(f"{self.tag} tensor freed twice")
        self.pool.free(self.block)
        self.state = TensorState.FREED

    def _expect(self, states: TensorState | tuple[TensorState, ...], action: str) -> None:
        allowed = states if isinstance(states, tuple) else (states,)
        if self.state not in allowed:
            raise TensorStateError(f"{self.tag} tensor cannot be {action} while {self.state}")
