"""`aisim inspect`: what a real ONNX model holds and how the simulator reads it.

    report = inspect_model("model.onnx")   # OnnxReport; InspectError when unreadable
    print(report_text(report))             # the readable report
    print(scenario_block(report))          # a `models:` entry for a scenario

Importing this package does not import `onnx` (an optional extra: `pip install 'aisim[inspect]'`);
`inspect_model` does, and raises OnnxMissing with that install line when it is absent.
"""

from .block import architecture_of, scenario_block, tensors_of
from .model import (
    MISSING_ONNX,
    InspectError,
    OnnxMissing,
    OnnxReport,
    TensorInfo,
    inspect_model,
)
from .optable import OPS, UNKNOWN, OpBehaviour, behaviour
from .text import report_text

__all__ = [
    "MISSING_ONNX",
    "OPS",
    "UNKNOWN",
    "InspectError",
    "OnnxMissing",
    "OnnxReport",
    "OpBehaviour",
    "TensorInfo",
    "architecture_of",
    "behaviour",
    "inspect_model",
    "report_text",
    "scenario_block",
    "tensors_of",
]
