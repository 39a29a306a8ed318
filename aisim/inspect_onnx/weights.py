"""Bytes of a model's constant tensors, counted from dims so that external data is never read.

Three sources: initializers (inline or in external files), Constant nodes (some exporters store weights there) and
ConstantOfShape nodes filling a constant shape, which is how the onnx wheel's light models keep real architectures small
(the `onnx` wheel's `onnx/backend/test/data/light/`: light_resnet50 implies 102.4 MB).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .optable import DEFAULT_DOMAINS
from .types import storage_bytes


@dataclass(frozen=True)
class Weights:
    """Bytes the model's constant tensors take, by where they come from."""

    initializers: int
    initializer_bytes: int
    external: int
    """Initializers whose data lives in another file (sized from dims, not read)."""
    external_bytes: int
    external_files: list[str]
    constant_nodes: int
    """Constant nodes holding a tensor (some exporters store weights this way)."""
    constant_bytes: int
    implied: int
    """ConstantOfShape nodes filling a constant shape: weights replaced by their shape, as in onnx's light models."""
    implied_bytes: int
    bytes_by_type: dict[str, int]
    """All three sources together, per ONNX element type."""

    @property
    def total_bytes(self) -> int:
        """What the weights take once materialised on the device."""
        return self.initializer_bytes + self.constant_bytes + self.implied_bytes


def graphs(onnx: ModuleType, graph: Any, depth: int = 0) -> Iterator[tuple[Any, int]]:
    """The graph and every subgraph under it (If branches, Loop and Scan bodies), with their depth."""
    yield graph, depth
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from graphs(onnx, attribute.g, depth + 1)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    yield from graphs(onnx, sub, depth + 1)


def _tensor_bytes(onnx: ModuleType, t: Any) -> tuple[str, int]:
    type_name = onnx.TensorProto.DataType.Name(t.data_type)
    if type_name == "STRING":
        return type_name, sum(len(s) for s in t.string_data)
    return type_name, storage_bytes(type_name, math.prod(t.dims)) or 0


def weights(onnx: ModuleType, model: Any) -> Weights:
    """The constant tensors of the model and all its subgraphs."""
    by_type: Counter[str] = Counter()
    initializers = external = total = external_total = 0
    files: set[str] = set()
    constant_values: dict[str, Any] = {}
    consts = const_total = implied = implied_total = 0
    for graph, _ in graphs(onnx, model.graph):
        for t in graph.initializer:
            type_name, size = _tensor_bytes(onnx, t)
            initializers += 1
            total += size
            by_type[type_name] += size
            constant_values[t.name] = t
            if t.data_location == onnx.TensorProto.EXTERNAL:
                external += 1
                external_total += size
                files.update(e.value for e in t.external_data if e.key == "location")
        for node in graph.node:
            value = next((a.t for a in node.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR), None)
            if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS and value is not None:
                type_name, size = _tensor_bytes(onnx, value)
                consts += 1
                const_total += size
                by_type[type_name] += size
                constant_values[node.output[0]] = value
    for graph, _ in graphs(onnx, model.graph):
        for node in graph.node:
            shape = constant_values.get(node.input[0]) if node.op_type == "ConstantOfShape" and node.input else None
            if shape is None or shape.data_location == onnx.TensorProto.EXTERNAL:
                continue
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            type_name = onnx.TensorProto.DataType.Name(value.data_type) if value is not None else "FLOAT"
            size = storage_bytes(type_name, int(onnx.numpy_helper.to_array(shape).prod())) or 0
            implied += 1
            implied_total += size
            by_type[type_name] += size
    return Weights(initializers, total, external, external_total, sorted(files), consts, const_total,
                   implied, implied_total, dict(sorted(by_type.items())))
