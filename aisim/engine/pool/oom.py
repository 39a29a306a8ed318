"""PyTorch's out-of-memory error: `format_size` and the current (2.2 and later) message text.

Source: `c10/cuda/CUDACachingAllocator.cpp`, `DeviceCachingAllocator::malloc` and
`reportProcessMemoryInfo` (pytorch/pytorch `c10/cuda/CUDACachingAllocator.cpp`). The text is built
piece by piece exactly as the C++ concatenates it, double spaces included, so that a client that
parses real messages parses ours.
"""

from __future__ import annotations

from collections.abc import Sequence

KIB = 1024
MIB = 1024 * 1024
GIB = 1024 * 1024 * 1024


def format_size(size: int) -> str:
    """`format_size`: bytes up to 1024, then KiB up to 1 MiB, MiB up to 1 GiB, else GiB, two decimals.

    The bounds are inclusive, so 1024 prints as `1024 bytes` and 1 GiB as `1024.00 MiB`.
    """
    if size <= KIB:
        return f"{size} bytes"
    if size <= MIB:
        return f"{size / 1024.0:.2f} KiB"
    if size <= GIB:
        return f"{size / 1048576.0:.2f} MiB"
    return f"{size / 1073741824.0:.2f} GiB"


def process_info(processes: Sequence[tuple[int | None, int]]) -> str:
    """NVML's part of the message: one sentence per compute process; `None` is this process."""
    parts = []
    for pid, used in processes:
        who = "Including non-PyTorch memory, this process" if pid is None else f"Process {pid}"
        parts.append(f"{who} has {format_size(used)} memory in use. ")
    return "".join(parts)


def oom_message(
    *,
    alloc_size: int,
    device: int,
    total: int,
    device_free: int,
    allocated: int,
    reserved: int,
    processes: Sequence[tuple[int | None, int]] = (),
    allowed: int | None = None,
    private_pools: int = 0,
) -> str:
    """The message of `torch.OutOfMemoryError`, current format.

    Args:
        alloc_size: the segment size the allocator tried to get (`Tried to allocate`).
        device: the CUDA device index.
        total, device_free: what `cudaMemGetInfo` returns.
        allocated, reserved: `allocated_bytes.all.current` and `reserved_bytes.all.current`.
        processes: NVML's compute processes as (pid, bytes); pid `None` marks this process. Empty
            when NVML is unavailable, which drops the sentence.
        allowed: the per-process cap when a memory fraction is set.
        private_pools: bytes cached in private pools (CUDA graphs).
    """
    allowed_info = f"{format_size(allowed)} allowed; " if allowed is not None else ""
    private_msg = ""
    if private_pools > 0:
        private_msg = f"with {format_size(private_pools)} allocated in private pools (e.g., CUDA Graphs), "
    return (
        f"CUDA out of memory. Tried to allocate {format_size(alloc_size)}. GPU {device} has a total capacity of "
        f"{format_size(total)} of which {format_size(device_free)} is free. {process_info(processes)}{allowed_info}"
        f"Of the allocated memory {format_size(allocated + private_pools)} is allocated by PyTorch, {private_msg}"
        f"and {format_size(reserved - allocated - private_pools)} is reserved by PyTorch but unallocated."
        " If reserved but unallocated memory is large try setting"
        " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid"
        " fragmentation.  See documentation for Memory Management "
        " (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


class OutOfMemoryError(RuntimeError):
    """`torch.OutOfMemoryError` (a `RuntimeError`): no cached block fits and the device has no room.

    `str(error)` is PyTorch's message; the numbers it was built from are attributes, so the engine can
    record the failure as data rather than parse text.
    """

    def __init__(
        self,
        message: str,
        *,
        requested: int,
        size: int,
        alloc_size: int,
        stream: int,
        device: int,
        device_free: int,
        allocated: int,
        reserved: int,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.requested = requested
        """The size the caller asked for."""
        self.size = size
        """The rounded size (the `size` of PyTorch's `oom` trace entry)."""
        self.alloc_size = alloc_size
        """The segment size the allocator tried to obtain (`Tried to allocate`)."""
        self.stream = stream
        self.device = device
        self.device_free = device_free
        self.allocated = allocated
        self.reserved = reserved
