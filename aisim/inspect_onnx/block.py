"""A scenario `models:` entry for an inspected ONNX model, ready to paste into a scenario.

The scenario language needs an explicit architecture for a model without a preset family, so
the graph's figures are mapped onto it:
- `params`: weight bytes over the bytes of the dominant weight type, so that the simulated weight
  memory equals the file's (initializers, Constant nodes and ConstantOfShape fills together);
- `dtype`: the weight type holding the most bytes (fp32 when none maps);
- `layers`: weight layers (MatMul, Gemm, Conv, ConvTranspose and their integer forms);
- `hidden`: the widest feature dimension a weight layer reads or writes (ResNet-50: 2048);
- `heads`, `kvHeads`, `headDim`: 0, as for the resnet-50 preset: no attention KV cache;
- `vocab`: elements per sample of the first output (a classifier's classes);
- `flopsPerSample`: the FLOPs of one sample, when the shapes give them.
`kserve` follows Triton's auto-complete for ONNX (triton-inference-server/onnxruntime_backend `src/onnxruntime.cc`):
platform `onnxruntime_onnx`; when every input and output has a variable leading dimension the model batches, with the
default max batch size of 4 and a dynamic batcher; otherwise maxBatchSize 0.
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path
from typing import Any, TypeVar

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from .model import InspectError, OnnxReport, TensorInfo
from .types import ELEMENT_BITS, SCENARIO_DTYPES

Node = TypeVar("Node", CommentedMap, CommentedSeq)

TRITON_DEFAULT_MAX_BATCH = 4
"""Triton's `default-max-batch-size` for auto-completed ONNX models."""


def model_id(file: str) -> str:
    """The model id: the file name without `.onnx`, whitespace replaced (ids may not contain any)."""
    return re.sub(r"\s+", "-", Path(file).name.removesuffix(".onnx")) or "model"


def _dtype(report: OnnxReport) -> str:
    sized = {k: v for k, v in report.weights.bytes_by_type.items() if k in SCENARIO_DTYPES and v}
    return SCENARIO_DTYPES[max(sized, key=lambda k: (sized[k], k))] if sized else "fp32"


def _tensor(info: TensorInfo) -> CommentedMap:
    if info.datatype is None:
        raise InspectError(f"tensor {info.name!r} is {info.onnx_type}, which has no KServe v2 datatype")
    if info.shape is None:
        raise InspectError(f"tensor {info.name!r} has no known rank; the scenario needs its shape")
    entry = CommentedMap(name=info.name, datatype=info.datatype, shape=_flow(CommentedSeq(info.shape)))
    return _flow(entry)


def _flow(node: Node) -> Node:
    node.fa.set_flow_style()
    return node


def _per_sample(info: TensorInfo) -> int | None:
    dims = info.dims or []
    rest = dims[1:] if len(dims) > 1 else dims
    return math.prod(rest) if all(isinstance(d, int) for d in rest) else None  # type: ignore[arg-type]


def _batches(report: OnnxReport) -> bool:
    tensors = [*report.inputs, *report.outputs]
    return bool(tensors) and all(t.dims and not isinstance(t.dims[0], int) for t in tensors)


def architecture_of(report: OnnxReport) -> dict[str, Any]:
    """The scenario `architecture` of an inspected model (camelCase keys; see the module docstring)."""
    dtype = _dtype(report)
    element_bytes = next(ELEMENT_BITS[k] for k, v in SCENARIO_DTYPES.items() if v == dtype) / 8
    classes = _per_sample(report.outputs[0]) if report.outputs else None
    arch: dict[str, Any] = {"params": max(1, math.ceil(report.weights.total_bytes / element_bytes)),
                            "layers": max(1, report.costs.layers), "hidden": report.costs.widest or 1,
                            "heads": 0, "kvHeads": 0, "headDim": 0, "vocab": classes or 1, "dtype": dtype}
    if report.flops_per_sample is not None:
        arch["flopsPerSample"] = report.flops_per_sample
    return arch


def tensors_of(report: OnnxReport) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The model's inputs and outputs as scenario tensors (name, datatype, shape)."""
    return [dict(_tensor(t)) for t in report.inputs], [dict(_tensor(t)) for t in report.outputs]


def scenario_block(report: OnnxReport, gpu: str = "gpu0") -> str:
    """YAML text of a `models:` list holding one entry for the model, placed on GPU id `gpu`."""
    arch = CommentedMap(architecture_of(report))
    if not report.costs.widest:
        arch.yaml_add_eol_comment("no weight layer with known widths: set it", "hidden")
    if not (_per_sample(report.outputs[0]) if report.outputs else None):
        arch.yaml_add_eol_comment("first output's size per sample is not known: set it", "vocab")
    version = CommentedMap(version="1")
    version["inputs"] = CommentedSeq(_tensor(t) for t in report.inputs)
    version["outputs"] = CommentedSeq(_tensor(t) for t in report.outputs)
    version["onnxruntime"] = _flow(CommentedMap(optimizationLevel="all"))
    batches = _batches(report)
    kserve = CommentedMap(platform="onnxruntime_onnx", maxBatchSize=TRITON_DEFAULT_MAX_BATCH if batches else 0)
    if batches:
        kserve["dynamicBatching"] = _flow(CommentedMap())
    entry = CommentedMap(id=model_id(report.file), task="classify", runtime="onnxruntime")
    entry["architecture"] = arch
    entry["placement"] = _flow(CommentedMap(gpus=_flow(CommentedSeq([gpu]))))
    entry["versions"] = CommentedSeq([version])
    entry["kserve"] = kserve
    document = CommentedMap(models=CommentedSeq([entry]))
    document.yaml_set_start_comment(
        f"generated by `aisim inspect --scenario` from {Path(report.file).name}; "
        f"{gpu!r} must be a GPU id of the scenario")
    yaml = YAML()
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    out = io.StringIO()
    yaml.dump(document, out)
    return out.getvalue()
