"""The scenario's API faults: the fault book lives in the engine (`aisim.engine.api_faults`), which meets them in
headless runs too; the servers pick from it here."""

from __future__ import annotations

from ..engine.api_faults import (
    API_FAULTS,
    ERROR_BY_STATUS,
    ApiFault,
    Context,
    FaultBook,
)

__all__ = ["API_FAULTS", "ERROR_BY_STATUS", "ApiFault", "Context", "FaultBook"]
