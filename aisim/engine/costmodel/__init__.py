"""The engine's step-time model: every GPU kernel from vLLM's measured kernel tables (`kernels/`,
`step_kernels.py`), the step assembly with the host's time between kernels (`model.py`), and the host terms
fitted on end-to-end runs (`calibration.py`, `host.json`; `bench/calibrate.py` regenerates them); what a
server adds to an offline batch is `online.py`'s."""

from .model import (
    GRAPH_MAX_TOKENS,
    CostModel,
    Efficiency,
    GpuConstants,
    graph_capture_limit,
)

__all__ = ["GRAPH_MAX_TOKENS", "CostModel", "Efficiency", "GpuConstants", "graph_capture_limit"]
