"""FLOPs of the weight layers (MatMul, Gemm, Conv) from their shapes, as 2 x multiply-accumulates.

Only the products are counted, as model cards do (ResNet-50: 4.1 GMAC, 8.2 GFLOP); bias adds and
activations are left out. A count needs every dimension it uses to be a number: a symbolic or
unknown dimension makes that node's FLOPs unknown rather than guessed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Dims = list[int | str | None]
"""A tensor's dimensions: a number, a symbolic name, or None when unknown."""

MATMUL_A = {"MatMul": 0, "MatMulInteger": 0, "QLinearMatMul": 0}
"""Index of the left operand; K is its last dimension."""
CONV_W = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3}
"""Index of the weight [C_out, C_in / group, k...]."""
COUNTED = frozenset({*MATMUL_A, *CONV_W, "Gemm", "ConvTranspose"})
"""Op types whose FLOPs are estimated."""


@dataclass(frozen=True)
class LayerCost:
    """One weight layer: its FLOPs (None when a shape is unknown) and its feature widths."""

    flops: int | None
    widths: tuple[int, ...]
    """Input and output feature widths (K and N, or C_in and C_out) that are known."""
    missing: str = ""
    """Which tensor's shape was not known, for the report."""


def _known(dims: Dims | None) -> list[int] | None:
    if dims is None or any(not isinstance(d, int) for d in dims):
        return None
    return [int(d) for d in dims]  # type: ignore[arg-type]


def _attr(node: Any, name: str, default: int) -> int:
    for attribute in node.attribute:
        if attribute.name == name:
            return int(attribute.i)
    return default


def layer_cost(node: Any, dims: Callable[[str], Dims | None]) -> LayerCost:
    """FLOPs and widths of a counted node; `dims` looks a tensor's dimensions up by name."""
    op = node.op_type
    out_name = node.output[0]
    if op in MATMUL_A or op == "Gemm":
        a_name = node.input[MATMUL_A.get(op, 0)]
        a_dims, out_dims = dims(a_name) or [], dims(out_name) or []
        if op == "Gemm":
            k = (a_dims[0] if _attr(node, "transA", 0) else a_dims[1]) if len(a_dims) == 2 else None
        else:
            k = a_dims[-1] if a_dims else None
        n = out_dims[-1] if out_dims else None
        widths = tuple(w for w in (k, n) if isinstance(w, int))
        a, out = _known(dims(a_name)), _known(dims(out_name))
        if a is None or out is None or not isinstance(k, int):
            return LayerCost(None, widths, a_name if a is None else out_name)
        return LayerCost(2 * math.prod(out) * k, widths)
    w_name = node.input[CONV_W.get(op, 1)]
    w = _known(dims(w_name))
    group = _attr(node, "group", 1)
    if op == "ConvTranspose":
        x_name = node.input[0]
        x = _known(dims(x_name))
        widths = (w[0], w[1] * group) if w else ()
        if w is None or x is None:
            return LayerCost(None, widths, w_name if w is None else x_name)
        return LayerCost(2 * math.prod(x) * math.prod(w[1:]), widths)
    y = _known(dims(out_name))
    widths = (w[1] * group, w[0]) if w else ()
    if w is None or y is None:
        return LayerCost(None, widths, w_name if w is None else out_name)
    return LayerCost(2 * math.prod(y) * math.prod(w[1:]), widths)
