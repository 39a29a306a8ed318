"""Moved to `aisim.engine.costmodel.calibration` (this name kept for callers outside the package)."""

from .costmodel.calibration import *  # noqa: F403
from .costmodel.calibration import (
    DOCUMENT,
    constants,
    efficiency,
    host,
    replace_document,
    with_host,
)

__all__ = ["DOCUMENT", "constants", "efficiency", "host", "replace_document", "with_host"]
