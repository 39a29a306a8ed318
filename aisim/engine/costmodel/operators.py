"""Time of one operator on one GPU: the curves fitted on the Vidur operator profiles.

A linear layer (GEMM of M tokens by an N x K weight shard, BF16) takes

    t = t0 + ((bytes / B)^p + (2 (M + m0) N K / F)^p)^(1/p),  bytes = 2 (N K + M K + M N)

a kernel floor `t0`, then a smooth maximum of the weight-and-activation traffic over the achieved
bandwidth `B` and the FLOPs over the achieved tensor throughput `F`; `m0` pads small token counts
to the tile the kernel computes anyway, `p` sets how sharp the roofline knee is. The five
constants are fitted per GPU on every linear operator Vidur profiled (QKV, output projection,
gate/up, down, at TP 1-8, 1-4,096 tokens, six to eight models: `bench/vidur.py`), so a model that
was never profiled gets its operators from its shapes alone.

An element-wise operator (norm, rotary embedding, activation, residual add, embedding lookup)
takes `floor + elements x per_element`, fitted per operator class and GPU the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import numpy as np

GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
"""Vidur's linear operators."""
ELEMENTWISE = {"input_layernorm": "norm", "post_attention_layernorm": "norm", "attn_rope": "rope",
               "mlp_act": "act", "add": "add", "emb": "emb"}
"""Vidur's element-wise operators and the class whose curve they share."""

Number = TypeVar("Number", float, np.ndarray)


@dataclass(frozen=True)
class GemmCurve:
    """The fitted GEMM constants of one GPU (see the module docstring)."""

    t0: float
    """Kernel floor, seconds."""
    bandwidth: float
    """Achieved memory bandwidth of GEMM operand traffic, bytes/s."""
    flops: float
    """Achieved BF16 tensor throughput at large shapes, FLOP/s."""
    m0: float
    """Token padding of small GEMMs (tile rows computed regardless)."""
    p: float
    """Sharpness of the roofline knee (smooth maximum exponent)."""

    def scaled(self, memory: float, compute: float) -> GemmCurve:
        """The curve with its bandwidth divided by `memory` and its throughput by `compute`."""
        return GemmCurve(self.t0, self.bandwidth / memory, self.flops / compute, self.m0, self.p)


def gemm_s(curve: GemmCurve, m: Number, n: Number, k: Number) -> Number:
    """Seconds of an (m x k) by (k x n) BF16 GEMM."""
    memory = 2 * (n * k + m * k + m * n) / curve.bandwidth
    compute = 2 * (m + curve.m0) * n * k / curve.flops
    high = np.maximum(memory, compute)
    low = np.minimum(memory, compute)
    return curve.t0 + high * (1 + (low / high) ** curve.p) ** (1 / curve.p)


def elementwise_s(constants: tuple[float, float], elements: Number) -> Number:
    """Seconds of an element-wise kernel over `elements` values: (floor, per element)."""
    return constants[0] + elements * constants[1]
