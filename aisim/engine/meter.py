"""A replica's GPU work, accounted in its devices' meters (`gpu/meter.py`) while telemetry reads them.

Only metered replicas pay for this (a device is metered when telemetry samples it), so headless
runs without telemetry keep their speed.

Steps that go through the stream scheduler (`Replica.routed`) put their kernels on the device's
compute engine, which counts busy time itself; the replica gives their kernels the step's tensor
and memory shares. Steps that bypass it (one replica alone on its GPUs, the fast path) are
accounted here: a step of duration d spends its host part first (scheduling, input preparation,
launches) and its GPU part last, so the GPU is busy for `share x d` at the end of each step, where
`share` is the cost model's GPU time over the step's time. A run of decode steps in flight is
counted pro rata at the moment telemetry reads it, step by step, and a killed engine's last run up
to its death.

Bytes: each step copies its inputs to every GPU of the group (token ids, positions, block tables;
`graph.input_bytes`) and the sampled tokens back from the first one (8 bytes per request), as the
per-layer step graph does with copy engines; under tensor parallelism, each layer all-reduces its
attention and MLP outputs twice (ring: 2 (TP-1)/TP x hidden x dtype bytes per token each).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..scenario.presets import DTYPE_BYTES
from .costmodel import CostModel
from .gpu.graph import input_bytes
from .gpu.meter import Activity

if TYPE_CHECKING:
    from .gpu import GpuDevice
    from .replica import StreamPlacement, _Plan
    from .request import Request

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray]
"""Per step of a decode run: GPU share of the step's time, tensor ns at peak, memory ns at peak."""


class ReplicaMeter:
    """Accounts one replica's steps in the meters of its devices."""

    def __init__(self, placement: StreamPlacement, cost: CostModel) -> None:
        self.devices: list[GpuDevice] = list(placement.devices)
        self.cost = cost
        self.layer_detail = placement.detail == "layer"
        self.max_blocks = placement.max_blocks
        tp = len(self.devices)
        arch = placement.arch
        self.allreduce_per_token = (2 * arch.layers * 2 * (tp - 1) / tp * arch.hidden * DTYPE_BYTES[arch.dtype]
                                    if tp > 1 else 0.0)
        """NVLink bytes each GPU sends per token of a step."""

    # -- shapes of a plan --------------------------------------------------------------------

    def _arrays(self, plan: _Plan) -> Arrays:
        """A decode run's per-step activity, computed once (its requests do not change until it is applied)."""
        if plan.activity is None:
            context = sum(r.computed for r, _ in plan.batch)
            share, tensor, dram = self.cost.decode_activity(len(plan.batch), context, len(plan.ends))
            plan.activity = (share, tensor * 1e9, dram * 1e9)
        return plan.activity  # type: ignore[return-value]

    def _single(self, plan: _Plan) -> tuple[float, float, float]:
        """A single step's (GPU share, tensor ns, memory ns), computed once."""
        if plan.activity is None:
            batch = plan.batch
            tokens = sum(q for _, q in batch)
            context = sum(r.computed for r, _ in batch)
            pairs = sum(q * r.computed + q * (q + 1) / 2 for r, q in batch)
            share, tensor, dram = self.cost.activity(len(batch), tokens, context, pairs)
            plan.activity = (share, tensor * 1e9, dram * 1e9)
        return plan.activity  # type: ignore[return-value]

    @staticmethod
    def _tokens(plan: _Plan) -> int:
        return len(plan.batch) if plan.decode_run else sum(q for _, q in plan.batch)

    def kernel_shares(self, batch: list[tuple[Request, int]], gpu_ns: int) -> tuple[float, float]:
        """(tensor, dram) shares of a routed step's kernel time (`Job.tensor`, `Job.dram`)."""
        if gpu_ns <= 0:
            return 0.0, 0.0
        tokens = sum(q for _, q in batch)
        context = sum(r.computed for r, _ in batch)
        pairs = sum(q * r.computed + q * (q + 1) / 2 for r, q in batch)
        _, tensor, dram = self.cost.activity(len(batch), tokens, context, pairs)
        return min(1.0, tensor * 1e9 / gpu_ns), min(1.0, dram * 1e9 / gpu_ns)

    # -- accounting --------------------------------------------------------------------------

    def _work(self, plan: _Plan, now: int | None) -> tuple[Activity, float]:
        """(the activity of the plan's steps up to `now`, or of all of them, d2h bytes)."""
        ends = np.asarray(plan.ends, dtype=np.int64)
        count = len(ends)
        work = Activity()
        if now is None:
            done = count
        elif count == 1:
            done = int(now >= ends[0])
        else:
            done = int(np.searchsorted(ends, now, side="right"))
        routed = bool(plan.stream)
        if not routed and plan.decode_run:
            shares, tensors, drams = (a[:count] for a in self._arrays(plan))
            starts = np.empty(count, dtype=np.int64)
            starts[0] = plan.start
            starts[1:] = ends[:-1]
            gpus = shares * (ends - starts)
            work.busy_ns = float(gpus[:done].sum())
            work.tensor_ns = float(tensors[:done].sum())
            work.dram_ns = float(drams[:done].sum())
            if done < count and now is not None:
                self._part(work, now, int(ends[done]), float(gpus[done]), float(tensors[done]), float(drams[done]))
        elif not routed:
            share, tensor_ns, dram_ns = self._single(plan)
            end = int(ends[0])
            gpu_ns = share * (end - plan.start)
            if done:
                work.busy_ns, work.tensor_ns, work.dram_ns = gpu_ns, tensor_ns, dram_ns
            elif now is not None:
                self._part(work, now, end, gpu_ns, tensor_ns, dram_ns)
        requests = len(plan.batch)
        tokens = self._tokens(plan)
        d2h = 0.0
        if not (routed and self.layer_detail):  # those steps' copies went through the copy engines
            work.h2d_bytes = float(done * input_bytes(tokens, requests, self.max_blocks))
            d2h = float(done * requests * 8)
        work.nvlink_bytes = done * tokens * self.allreduce_per_token
        return work, d2h

    @staticmethod
    def _part(work: Activity, now: int, end: int, gpu_ns: float, tensor_ns: float, dram_ns: float) -> None:
        """Add the part of a step in flight done by `now` (its GPU part is the end of the step)."""
        if gpu_ns > 0:
            part = min(max((now - (end - gpu_ns)) / gpu_ns, 0.0), 1.0)
            work.busy_ns += part * gpu_ns
            work.tensor_ns += part * tensor_ns
            work.dram_ns += part * dram_ns

    def _add(self, work: Activity, d2h: float) -> None:
        for index, device in enumerate(self.devices):
            device.meter.add(work)
            if index == 0:
                device.meter.d2h_bytes += d2h

    def step_done(self, plan: _Plan) -> None:
        """A step (or run of decode steps) ended: its work goes into the meters."""
        self._add(*self._work(plan, None))

    def cut(self, plan: _Plan, now: int) -> None:
        """The engine died at `now` with `plan` in flight: the work done so far goes into the meters."""
        self._add(*self._work(plan, now))

    def in_flight(self, plan: _Plan, now: int, device: GpuDevice) -> Activity:
        """The plan's work up to `now` on `device` (not yet in its meter)."""
        work, d2h = self._work(plan, now)
        if device is self.devices[0]:
            work.d2h_bytes += d2h
        return work
