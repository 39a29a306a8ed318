"""The fleet's one error type."""

from __future__ import annotations

from ..errors import ServeError


class FleetError(ServeError, ValueError):
    """A fleet setting the server cannot start with (a socket it cannot bind, a setting it cannot serve)."""
