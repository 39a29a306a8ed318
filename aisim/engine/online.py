"""Moved to `aisim.engine.costmodel.online` (this name kept for callers outside the package)."""

from .costmodel.online import frontend_ns, frontend_token_ns

__all__ = ["frontend_ns", "frontend_token_ns"]
