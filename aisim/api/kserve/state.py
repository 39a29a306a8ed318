"""What a Triton server keeps for the whole server, whichever wire (HTTP or gRPC) reads or changes it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .shared_memory import SharedMemory


def _logging() -> dict[str, Any]:
    return {"log_file": "", "log_info": True, "log_warning": True, "log_error": True, "log_verbose_level": 0,
            "log_format": "default"}


def _trace() -> dict[str, Any]:
    return {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1", "log_frequency": "0",
            "trace_file": "", "trace_mode": "triton"}


@dataclass
class KServeState:
    """Triton's server-wide settings and registries."""

    logging: dict[str, Any] = field(default_factory=_logging)
    """The log settings (`/v2/logging`)."""
    trace: dict[str, Any] = field(default_factory=_trace)
    """The global trace settings; `model_trace` holds per-model overrides."""
    model_trace: dict[str, dict[str, Any]] = field(default_factory=dict)
    scrapes: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per GPU, (busy ns, virtual time) at the previous metrics scrape (`metrics.triton`)."""
    shared_memory: SharedMemory = field(default_factory=SharedMemory)
    """The registered system shared-memory regions (both wires read and write them)."""
