"""PyTorch's `format_size` and out-of-memory text (reference §1.10)."""

from __future__ import annotations

from aisim.engine.pool import format_size, oom_message

from .pool_helpers import GiB, KiB, MiB

REAL_16417 = (
    "CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity of 23.65 GiB of which 11.06 MiB "
    "is free. Including non-PyTorch memory, this process has 23.60 GiB memory in use. Of the allocated memory "
    "22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch but unallocated. If reserved but "
    "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
"""The message quoted in pytorch/pytorch#16417 (2024), without the exception class prefix."""


def test_format_size_units_and_inclusive_bounds() -> None:
    assert format_size(0) == "0 bytes"
    assert format_size(1024) == "1024 bytes"
    assert format_size(1025) == "1.00 KiB"
    assert format_size(MiB) == "1024.00 KiB"
    assert format_size(MiB + 1) == "1.00 MiB"
    assert format_size(20 * MiB) == "20.00 MiB"
    assert format_size(GiB) == "1024.00 MiB"
    assert format_size(GiB + 1) == "1.00 GiB"
    assert format_size(int(1.5 * KiB)) == "1.50 KiB"


def test_a_real_message_is_reproduced_exactly() -> None:
    allocated = int(22.90 * GiB)
    message = oom_message(
        alloc_size=22 * MiB,
        device=0,
        total=int(23.65 * GiB),
        device_free=int(11.06 * MiB),
        allocated=allocated,
        reserved=allocated + int(194.87 * MiB),
        processes=[(None, int(23.60 * GiB))],
    )
    assert message == REAL_16417


def test_optional_parts() -> None:
    message = oom_message(
        alloc_size=2 * MiB,
        device=3,
        total=GiB,
        device_free=0,
        allocated=100 * MiB,
        reserved=200 * MiB,
        processes=[(None, 300 * MiB), (77, 10 * MiB)],
        allowed=512 * MiB,
        private_pools=20 * MiB,
    )
    assert (
        "GPU 3 has a total capacity of 1024.00 MiB of which 0 bytes is free. Including non-PyTorch memory, this "
        "process has 300.00 MiB memory in use. Process 77 has 10.00 MiB memory in use. 512.00 MiB allowed; Of the "
        "allocated memory 120.00 MiB is allocated by PyTorch, with 20.00 MiB allocated in private pools (e.g., CUDA "
        "Graphs), and 80.00 MiB is reserved by PyTorch but unallocated."
    ) in message
