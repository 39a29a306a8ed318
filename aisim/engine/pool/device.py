"""The driver side of a simulated GPU: physical capacity, memory held by others, and addresses.

An allocator never sees real memory; it asks this device for segments the way PyTorch asks CUDA:
`malloc` / `free` stand for `cudaMalloc` / `cudaFree`, `reserve_address` / `create_pages` for the
virtual-memory calls behind expandable segments (`cuMemAddressReserve`, `cuMemCreate` + `cuMemMap`).
A request succeeds while the physical bytes fit: capacity minus what the pool already holds minus
what is held outside the pool (this process's non-PyTorch memory such as the CUDA context and NCCL
buffers, and other processes). Physical fragmentation does not exist here, as on real GPUs where
the driver maps 2 MiB pages anywhere.

Addresses are virtual and deterministic: first fit, 2 MiB aligned, in a 16 TiB window at
0x7e0000000000, reused after a free. They matter only for ordering (PyTorch breaks best-fit ties on
the address) and for drawing a memory map.
"""

from __future__ import annotations

from bisect import bisect_left

PAGE = 2 * 1024 * 1024
VA_BASE = 0x7E00_0000_0000
VA_SIZE = 1 << 44


class SimulatedDevice:
    """One GPU as the allocator sees it through the CUDA runtime and NVML."""

    def __init__(
        self,
        capacity: int,
        index: int = 0,
        non_pytorch: int = 0,
        other_processes: dict[int, int] | None = None,
        nvml: bool = True,
    ) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        """Total memory as `cudaMemGetInfo` reports it."""
        self.index = index
        self.non_pytorch = non_pytorch
        """This process's memory outside the allocator (CUDA context, cuBLAS workspaces, NCCL)."""
        self.other_processes: dict[int, int] = dict(other_processes or {})
        """Memory of other processes on this GPU, by pid."""
        self.nvml = nvml
        """Whether NVML is available, so the OOM message lists the processes."""
        self.used = 0
        """Physical bytes handed to the allocator (segments plus mapped pages)."""
        self._segments: dict[int, int] = {}
        self._holes: list[tuple[int, int]] = [(VA_BASE, VA_BASE + VA_SIZE)]

    @property
    def outside(self) -> int:
        """Bytes held outside the pool: non-PyTorch memory of this process and other processes."""
        return self.non_pytorch + sum(self.other_processes.values())

    def free_bytes(self) -> int:
        """The `free` of `cudaMemGetInfo`."""
        return max(0, self.capacity - self.used - self.outside)

    def mem_get_info(self) -> tuple[int, int]:
        """`cudaMemGetInfo`: (free, total)."""
        return self.free_bytes(), self.capacity

    def processes(self) -> list[tuple[int | None, int]]:
        """NVML's compute processes as (pid, bytes used); pid `None` is this process, listed first."""
        if not self.nvml:
            return []
        mine: list[tuple[int | None, int]] = [(None, self.used + self.non_pytorch)]
        return mine + [(pid, used) for pid, used in sorted(self.other_processes.items()) if used > 0]

    # cudaMalloc / cudaFree

    def malloc(self, size: int) -> int | None:
        """`cudaMalloc`: the address of a new segment, or None (`cudaErrorMemoryAllocation`)."""
        if not self.create_pages(size):
            return None
        address = self.reserve_address(size)
        self._segments[address] = size
        return address

    def free(self, address: int) -> None:
        """`cudaFree` of a segment `malloc` returned."""
        size = self._segments.pop(address)
        self.release_pages(size)
        self.free_address(address, size)

    # virtual memory management (expandable segments)

    def create_pages(self, size: int) -> bool:
        """`cuMemCreate`: take `size` physical bytes if they fit."""
        if self.used + size + self.outside > self.capacity:
            return False
        self.used += size
        return True

    def release_pages(self, size: int) -> None:
        """`cuMemRelease`: give back physical bytes."""
        self.used -= size

    def reserve_address(self, size: int, align: int = PAGE) -> int:
        """`cuMemAddressReserve`: the lowest aligned free range of `size` bytes (no physical memory)."""
        for i, (start, end) in enumerate(self._holes):
            address = -(-start // align) * align
            if address + size <= end:
                pieces = [(s, e) for s, e in ((start, address), (address + size, end)) if e > s]
                self._holes[i : i + 1] = pieces
                return address
        raise MemoryError("simulated virtual address space exhausted")

    def free_address(self, address: int, size: int) -> None:
        """`cuMemAddressFree`: return a range to the address space, merged with its neighbours."""
        start, end = address, address + size
        i = bisect_left(self._holes, (start, end))
        if i < len(self._holes) and self._holes[i][0] == end:
            end = self._holes.pop(i)[1]
        if i > 0 and self._holes[i - 1][1] == start:
            i -= 1
            start = self._holes.pop(i)[0]
        self._holes.insert(i, (start, end))
