"""The GPU work of one engine step as a dependency graph of operators on streams.

Detail `step` (the default, fast): one kernel, the step's whole GPU time. Detail `layer`: the
structure vLLM launches, from the model family:

    inputs (H2D copy) -> layer 0 -> ... -> layer L-1 -> logits and sampling -> tokens (D2H copy)

The input copy (token ids, positions, block tables) is issued on the model's stream, so the first
layer waits for it by stream order. The sampled tokens go back on a side stream (`<stream>.out`,
as vLLM's asynchronous output copy does) that waits on the event recorded after sampling
(`cudaStreamWaitEvent`); the host then synchronises on that copy: that sync point ends the step.
The logits kernel takes the share of the step's GPU time that the cost model gives the LM head and
sampling (`CostModel.head_share`, from the same operator curves as the step's duration); the
layers share the rest equally (every layer runs the same operators on the same tokens).
The copies' time comes out of the step's host time, so both detail levels give the same step
duration on an idle GPU (the calibrated cost model already contains the copies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ...scenario.presets import ModelFamily
from .copy import copy_ns

Engine = Literal["compute", "h2d", "d2h"]


@dataclass(frozen=True, slots=True)
class Op:
    """One operator: `work` ns on its engine; it starts after the previous op of its stream and
    after the ops named in `waits` (events recorded on other streams)."""

    name: str
    engine: Engine
    stream: str
    work: int
    waits: tuple[int, ...] = ()


def input_bytes(tokens: int, requests: int, max_blocks: int) -> int:
    """Token ids (int32) and positions (int64) per token, a block-table row (int32) per request."""
    return tokens * 12 + requests * max_blocks * 4


def step_graph(detail: str, arch: ModelFamily, stream: str, host_ns: int, gpu_ns: int, tokens: int, requests: int,
               max_blocks: int, host_link: float, head_share: float = 0.0) -> tuple[int, list[Op]]:
    """(host ns before the GPU work, the ops) of one step; see the module docstring. `head_share`:
    the LM head's and sampling's share of `gpu_ns`."""
    if detail == "step":
        return host_ns, [Op("step", "compute", stream, gpu_ns)]
    copy_in = copy_ns(input_bytes(tokens, requests, max_blocks), host_link)
    copy_out = copy_ns(requests * 8, host_link)
    layers = max(arch.layers, 1)
    logits = int(gpu_ns * head_share) if arch.task == "generate" else 0
    per_layer, extra = divmod(gpu_ns - logits, layers)
    ops = [Op("inputs", "h2d", stream, copy_in)]
    ops += [Op(f"layer{i}", "compute", stream, per_layer + (1 if i < extra else 0)) for i in range(layers)]
    if logits:
        ops.append(Op("logits", "compute", stream, logits))
    ops.append(Op("tokens", "d2h", f"{stream}.out", copy_out, waits=(len(ops) - 1,)))
    return max(0, host_ns - copy_in - copy_out), ops
