"""Triton's shared-memory extensions, one registry per server, used by the HTTP and gRPC personalities alike.

System shared memory is served for real: a client creates a POSIX shared-memory object (`shm_open`, as
`tritonclient.utils.shared_memory` does), registers a window of it by key, offset and size, and names the
region in an input (the server reads the tensor from it) or an output (the server writes the result into it
and answers only the region and the byte size). Registration maps the window (`mmap` of `/dev/shm/KEY`,
where Linux keeps POSIX shared memory); unregistering unmaps it.

CUDA shared memory is answered as a Triton built without GPUs answers it (aisim has no device memory to
map): registering is refused, the status lists no region, unregistering succeeds.

Statuses and texts are Triton's (`src/shared_memory_manager.cc`, and the GPU-less branches of
`http_server.cc` / `grpc_server.cc`).
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from typing import Any

from .tensors import KServeError

SHM_ROOT = "/dev/shm"
"""Where Linux keeps POSIX shared-memory objects: `shm_open("/key")` is the file `/dev/shm/key`."""


@dataclass
class Region:
    name: str
    key: str
    offset: int
    byte_size: int
    view: mmap.mmap
    start: int
    """Where the window begins in the mapping (mappings begin on a page boundary at or before `offset`)."""

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}


class SharedMemory:
    """The server's registered system shared-memory regions, by name."""

    def __init__(self) -> None:
        self.regions: dict[str, Region] = {}

    def register(self, name: str, key: Any, offset: Any, byte_size: Any) -> None:
        if not isinstance(key, str) or not isinstance(offset, int) or not isinstance(byte_size, int) \
                or offset < 0 or byte_size < 0:
            raise KServeError(400, f"failed to register shared memory region '{name}': invalid args")
        if name in self.regions:
            raise KServeError(409, f"shared memory region '{name}' already in manager", grpc="ALREADY_EXISTS")
        path = os.path.join(SHM_ROOT, key.lstrip("/"))
        if "/" in key.lstrip("/") or not key.strip("/"):
            raise KServeError(500, f"Unable to open shared memory region: '{key}'")
        try:
            descriptor = os.open(path, os.O_RDWR)
        except OSError:
            raise KServeError(500, f"Unable to open shared memory region: '{key}'") from None
        try:
            size = os.fstat(descriptor).st_size
            if offset + byte_size > size:
                raise KServeError(400, f"failed to register shared memory region '{name}': invalid args")
            start = offset - offset % mmap.ALLOCATIONGRANULARITY  # mmap's offset must be page-aligned
            try:
                view = mmap.mmap(descriptor, offset + byte_size - start, offset=start) if byte_size else mmap.mmap(-1, 1)
            except (OSError, ValueError) as error:
                raise KServeError(400, f"failed to register shared memory region '{name}': unable to process address "
                                       f"space{error}") from None
        finally:
            os.close(descriptor)
        self.regions[name] = Region(name, key, offset, byte_size, view, offset - start)

    def status(self, name: str | None) -> list[dict[str, Any]]:
        if name is None:
            return [r.status() for r in self.regions.values()]
        region = self.regions.get(name)
        if region is None:
            raise KServeError(404, f"Unable to find system shared memory region: '{name}'")
        return [region.status()]

    def unregister(self, name: str | None) -> None:
        """Unregister a region (every region without a name); an unknown name is no error, as in Triton."""
        for found in list(self.regions) if name is None else [name]:
            region = self.regions.pop(found, None)
            if region is not None:
                region.view.close()

    def _window(self, name: str, offset: int, byte_size: int) -> tuple[Region, int]:
        """The region and the position in its mapping of `offset`, checked as Triton's `GetMemoryInfo` checks it."""
        region = self.regions.get(name)
        if region is None:
            raise KServeError(404, f"Unable to find shared memory region: '{name}'")
        if offset >= region.byte_size and not (offset == 0 and region.byte_size == 0):
            raise KServeError(400, f"Invalid offset for shared memory region: '{name}'")
        if offset + byte_size > region.byte_size:
            raise KServeError(400, f"Invalid offset + byte size for shared memory region: '{name}'")
        return region, region.start + offset

    def read(self, name: str, offset: int, byte_size: int) -> bytes:
        region, start = self._window(name, offset, byte_size)
        return bytes(region.view[start:start + byte_size])

    def write(self, name: str, offset: int, data: bytes) -> None:
        region, start = self._window(name, offset, len(data))
        region.view[start:start + len(data)] = data

    def close(self) -> None:
        self.unregister(None)


def cuda_register(name: str) -> None:
    """CUDA shared memory on a Triton built without GPUs (`http_server.cc`, `grpc_server.cc`)."""
    raise KServeError(400, f"failed to register CUDA shared memory region: '{name}', GPUs not supported")


def cuda_status(name: str | None) -> list[dict[str, Any]]:
    if name is not None:
        raise KServeError(404, f"Unable to find cuda shared memory region: '{name}'")
    return []
