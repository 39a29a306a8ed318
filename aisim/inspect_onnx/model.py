"""Reading one ONNX file into an `OnnxReport`: versions, checker verdict, inferred shapes, weights, ops, FLOPs.

`onnx` is an optional extra, imported only when a model is inspected, so that `import aisim.cli`
stays light. External weight files are never read: their sizes come from the tensors' dims.
"""

from __future__ import annotations

import importlib
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import InputError
from ..extras import MissingExtra, require
from .flops import COUNTED, Dims, layer_cost
from .optable import DEFAULT_DOMAINS, OpBehaviour, behaviour
from .types import TRITON_DATATYPES
from .weights import Weights, graphs, weights

MISSING_ONNX = str(MissingExtra("reading an ONNX model", "inspect", ["onnx"]))


class InspectError(InputError):
    """A model file that cannot be read; the message says why."""


class OnnxMissing(InspectError):
    """The optional `onnx` package is not installed."""


def require_onnx() -> ModuleType:
    """The `onnx` package with the submodules inspection uses, or OnnxMissing naming the extra to install."""
    try:
        require("inspect", "reading an ONNX model")
    except MissingExtra as error:
        raise OnnxMissing(str(error)) from None
    try:
        onnx = importlib.import_module("onnx")
        for sub in ("checker", "shape_inference", "numpy_helper"):
            importlib.import_module(f"onnx.{sub}")
    except ImportError as error:
        raise OnnxMissing(MISSING_ONNX) from error
    return onnx


@dataclass(frozen=True)
class TensorInfo:
    """A named tensor's element type and dimensions."""

    name: str
    onnx_type: str
    """TensorProto type name (`FLOAT`), or the kind of a non-tensor value (`sequence`, `map`, `optional`)."""
    dims: Dims | None
    """Numbers, symbolic names (`batch`) or None per dimension; None when even the rank is unknown."""

    @property
    def datatype(self) -> str | None:
        """KServe v2 datatype (FP32, INT64, ...), None when KServe has none for this type."""
        return TRITON_DATATYPES.get(self.onnx_type)

    @property
    def shape(self) -> list[int] | None:
        """Dimensions as KServe writes them: -1 for symbolic or unknown ones."""
        return None if self.dims is None else [d if isinstance(d, int) else -1 for d in self.dims]

    def to_dict(self) -> dict[str, Any]:
        """Plain data, keeping the symbolic names next to the -1s."""
        return {"name": self.name, "datatype": self.datatype, "onnx_type": self.onnx_type,
                "shape": self.shape, "dims": self.dims}


@dataclass(frozen=True)
class OpRow:
    """One op type of the graph: how often it occurs, the table's reading of it, and its FLOPs."""

    op: str
    count: int
    behaviour: OpBehaviour
    counted: bool
    """True when FLOPs are estimated for this op type."""
    flops: int | None
    """FLOPs per inference of all its nodes; None when not counted or a shape is unknown."""


@dataclass(frozen=True)
class Costs:
    """The weight layers of a graph, summed."""

    flops: int | None
    """None when any counted node has an unknown shape."""
    by_op: dict[str, int | None]
    unknown: list[str]
    """`op 'node': tensor` for counted nodes whose shapes are not all numbers."""
    layers: int
    widest: int | None
    """The widest feature dimension a weight layer reads or writes."""


@dataclass(frozen=True)
class OnnxReport:
    """Everything `aisim inspect` says about one model."""

    file: str
    ir_version: int
    opsets: dict[str, int]
    producer: str
    graph_name: str
    checker_errors: list[str]
    declared_shapes: int
    """value_info entries in the file."""
    inferred_shapes: int
    """value_info entries after shape inference."""
    inference_error: str | None
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    intermediates: list[TensorInfo]
    weights: Weights
    nodes: int
    subgraph_nodes: int
    ops: list[OpRow]
    costs: Costs
    flops_per_sample: int | None
    """FLOPs for one sample: the batch dimension set to 1 (symbolic) or divided out (fixed)."""
    not_estimated: list[str] = field(default_factory=list)
    """Compute-bound op types present whose FLOPs the estimate leaves out (Einsum, LSTM, ...)."""

    @property
    def valid(self) -> bool:
        """True when the ONNX checker accepted the model."""
        return not self.checker_errors

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable data; unknown figures are the string "unknown"."""
        costs = self.costs
        return {
            "file": self.file, "ir_version": self.ir_version, "opsets": self.opsets, "producer": self.producer,
            "graph": self.graph_name,
            "checker": {"valid": self.valid, "errors": self.checker_errors},
            "shape_inference": {"declared": self.declared_shapes, "inferred": self.inferred_shapes,
                                "error": self.inference_error},
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
            "weights": {**asdict(self.weights), "total_bytes": self.weights.total_bytes},
            "nodes": self.nodes, "subgraph_nodes": self.subgraph_nodes,
            "ops": [{"op": r.op, "count": r.count, "category": r.behaviour.category,
                     "fusable": "unknown" if r.behaviour.fusable is None else r.behaviour.fusable,
                     "access": r.behaviour.access,
                     "flops": (r.flops if r.flops is not None else "unknown") if r.counted else None}
                    for r in self.ops],
            "flops": _known(costs.flops), "flops_per_sample": _known(self.flops_per_sample),
            "flops_unknown": costs.unknown, "flops_not_estimated": self.not_estimated,
            "weight_layers": costs.layers, "widest_feature": costs.widest,
            "intermediates": [t.to_dict() for t in self.intermediates],
        }


def _known(value: int | None) -> int | str:
    return "unknown" if value is None else value


def inspect_model(path: str | Path) -> OnnxReport:
    """Read, check and shape-infer an ONNX file; InspectError when it is not a readable model."""
    onnx = require_onnx()
    file = Path(path)
    model = _load(onnx, file)
    checker_errors: list[str] = []
    try:
        onnx.checker.check_model(str(file))
    except onnx.checker.ValidationError as error:
        checker_errors.append(str(error).strip())
    inferred, inference_error = _infer(onnx, model)
    graph = inferred.graph
    tensors = _tensors(onnx, graph)
    initializer_names = {t.name for t in graph.initializer}
    inputs = [tensors[i.name] for i in graph.input if i.name not in initializer_names]
    costs = _costs(graph, tensors)
    counts, subgraph_nodes = _op_counts(onnx, graph)
    rows = [_row(op, n, costs) for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    per_sample = _per_sample(onnx, model, inputs, costs)
    return OnnxReport(
        file=str(file), ir_version=model.ir_version,
        opsets={o.domain or "ai.onnx": o.version for o in model.opset_import},
        producer=f"{model.producer_name} {model.producer_version}".strip(), graph_name=graph.name,
        checker_errors=checker_errors, declared_shapes=len(model.graph.value_info),
        inferred_shapes=len(graph.value_info), inference_error=inference_error,
        inputs=inputs, outputs=[tensors[o.name] for o in graph.output],
        intermediates=[tensors[v.name] for v in graph.value_info],
        weights=weights(onnx, model), nodes=len(graph.node), subgraph_nodes=subgraph_nodes,
        ops=rows, costs=costs, flops_per_sample=per_sample,
        not_estimated=[r.op for r in rows if r.behaviour.access == "compute-bound" and not r.counted],
    )


def _load(onnx: ModuleType, file: Path) -> Any:
    if not file.is_file():
        raise InspectError(f"{file}: no such file")
    if file.stat().st_size == 0:
        raise InspectError(f"{file}: empty file, not an ONNX model")
    decode_error = importlib.import_module("google.protobuf.message").DecodeError
    try:
        model = onnx.load(str(file), load_external_data=False)
    except decode_error as error:
        raise InspectError(f"{file}: not an ONNX model ({error})") from error
    if model.ir_version == 0 and not model.HasField("graph"):
        raise InspectError(f"{file}: not an ONNX model (no IR version and no graph)")
    return model


def _infer(onnx: ModuleType, model: Any) -> tuple[Any, str | None]:
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True), None
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError) as error:
        return model, str(error).strip()


def _tensor(onnx: ModuleType, name: str, type_proto: Any) -> TensorInfo:
    kind = type_proto.WhichOneof("value")
    if kind != "tensor_type":
        return TensorInfo(name, (kind or "unknown").removesuffix("_type"), None)
    tt = type_proto.tensor_type
    dims: Dims | None = None
    if tt.HasField("shape"):
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
    return TensorInfo(name, onnx.TensorProto.DataType.Name(tt.elem_type), dims)


def _tensors(onnx: ModuleType, graph: Any) -> dict[str, TensorInfo]:
    """Every named tensor of the top graph with what is known of it; initializers' own dims win."""
    found = {v.name: _tensor(onnx, v.name, v.type) for v in (*graph.input, *graph.value_info, *graph.output)}
    for t in graph.initializer:
        found[t.name] = TensorInfo(t.name, onnx.TensorProto.DataType.Name(t.data_type), list(t.dims))
    return found


def _costs(graph: Any, tensors: dict[str, TensorInfo]) -> Costs:
    def dims(name: str) -> Dims | None:
        info = tensors.get(name)
        return info.dims if info else None

    by_op: dict[str, int | None] = {}
    unknown: list[str] = []
    widths: list[int] = []
    layers = 0
    for node in graph.node:
        if node.domain not in DEFAULT_DOMAINS or node.op_type not in COUNTED:
            continue
        layers += 1
        cost = layer_cost(node, dims)
        widths.extend(cost.widths)
        before = by_op.get(node.op_type, 0)
        by_op[node.op_type] = None if before is None or cost.flops is None else before + cost.flops
        if cost.flops is None:
            unknown.append(f"{node.op_type} {node.name or node.output[0]!r}: shape of {cost.missing!r}")
    total = None if unknown else sum(v or 0 for v in by_op.values())
    return Costs(total, by_op, unknown, layers, max(widths) if widths else None)


def _row(op: str, count: int, costs: Costs) -> OpRow:
    """`op` is `Conv` in the default domain, `domain:Op` elsewhere."""
    domain, _, op_type = op.rpartition(":")
    counted = domain in DEFAULT_DOMAINS and op_type in COUNTED
    return OpRow(op, count, behaviour(domain, op_type), counted, costs.by_op.get(op) if counted else None)


def _op_counts(onnx: ModuleType, graph: Any) -> tuple[Counter[str], int]:
    """Op types of the graph and its subgraphs (If, Loop, Scan bodies), as `Conv` or `domain:Op`."""
    counts: Counter[str] = Counter()
    nested = 0
    for sub, depth in graphs(onnx, graph):
        for node in sub.node:
            counts[node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}:{node.op_type}"] += 1
        nested += len(sub.node) if depth else 0
    return counts, nested


def _per_sample(onnx: ModuleType, model: Any, inputs: list[TensorInfo], costs: Costs) -> int | None:
    """FLOPs of one sample: every input's leading dimension is the batch, fixed or one shared symbol."""
    leads = [t.dims[0] if t.dims else None for t in inputs]
    if not leads or any(lead is None for lead in leads) or len(set(leads)) != 1:
        return None
    lead = leads[0]
    if isinstance(lead, int):
        return None if costs.flops is None or lead < 1 else costs.flops // lead
    single = onnx.ModelProto()
    single.CopyFrom(model)
    graph = single.graph
    for value in (*graph.input, *graph.output, *graph.value_info):
        if value.type.WhichOneof("value") == "tensor_type":
            for dim in value.type.tensor_type.shape.dim:
                if dim.dim_param == lead:
                    dim.dim_value = 1
    inferred, error = _infer(onnx, single)
    return None if error else _costs(inferred.graph, _tensors(onnx, inferred.graph)).flops
