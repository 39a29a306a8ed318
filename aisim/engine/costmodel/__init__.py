"""The engine's step-time model: operator curves fitted on measured profiles (`operators.py`), NCCL
all-reduce tables (`collectives.py`), ratios for GPUs without profiles (`derived.py`), and the
step assembly (`model.py`). The fitted constants live in `aisim/engine/calibrated.json`
(`calibration.py` loads them; `bench/calibrate.py` regenerates them)."""

from .model import (
    GRAPH_MAX_TOKENS,
    CostModel,
    Efficiency,
    GpuConstants,
    graph_capture_limit,
)

__all__ = ["GRAPH_MAX_TOKENS", "CostModel", "Efficiency", "GpuConstants", "graph_capture_limit"]
