"""All-reduce time by message size, following vLLM's choice of kernel.

NCCL: the tables Vidur measured, interpolated.

vLLM's tensor parallelism all-reduces each layer's attention output and MLP output (two per
layer, `hidden x tokens x 2` bytes each), the embedding's output once, and gathers the logits.
The tables (`calibrated.json`, `allreduce`) hold, per profiled GPU, node type (`nvswitch`: every
GPU pair at full NVLink bandwidth, Vidur's "dgx"; `pairwise`: GPUs linked in pairs) and worker
count, the median time over log-spaced size bins made monotone (`bench/vidur.py`). A size between
two bins is interpolated linearly; beyond the last bin the last slope continues.

A worker count the table lacks takes the nearest one, its size scaled by the ring factor
2 (n-1)/n; a GPU without a table takes its base GPU's table with the sizes scaled by the ratio
of their link bandwidths (`derived.py`), which keeps the latency floor and scales the bandwidth part.

What the tables time. Vidur (`vidur/profiling/collectives`) launches `torch.distributed.all_reduce`
eagerly, 11 times back to back, and records the median NCCL *kernel* duration (Kineto). A small
all-reduce kernel spins until every rank's kernel has started, so once the GPUs are faster than the
hosts its duration is the host's dispatch cadence: the tables' small-size floor (20-40 us) is mostly
host launch. The same profiles also hold 6-7 us small all-reduces (H100 2 GPUs on NVSwitch and in
pairs, A100 in pairs: the bimodal 7 / 28 us of the H100 pairwise rows), the kernel when no rank
waits on a late launch; `bench/vidur.allreduce_device_latency` takes the smallest median time at
<= 64 KiB per GPU (7 us on both) as the device-side latency. nccl-tests with CUDA graphs give the
same order (about 6 us for 2 H100s, NVIDIA/nccl issue 1259).

vLLM's selection (`vllm/distributed/device_communicators/custom_all_reduce.py`,
`csrc/custom_all_reduce.cuh`): its own kernel when the group is 2, 4, 6 or 8 GPUs of one node that
are fully NVLink-connected, or 2 GPUs with peer access (here: the pairwise NVLink pair), and the
message is under `max_size` (8 MiB); one-shot (each GPU reads the n-1 peers' buffers: (n-1) x size
bytes) for 2 GPUs, for <= 4 GPUs under 512 KiB and for <= 8 under 256 KiB, two-shot
(reduce-scatter then all-gather: 2 (n-1)/n x size) above. Otherwise NCCL (pynccl). PCIe groups are
priced by NCCL here: cloud PCIe GPUs often lack peer access, which the custom kernel needs.

- custom kernel: device latency per synchronising stage (one-shot 1, two-shot 2) plus its NVLink
  bytes at the achieved per-GPU bandwidth (`achieved_bandwidth`); in eager steps, plus the copy
  into its registered buffer (read and write of the message at HBM bandwidth);
  Checked against vLLM's own H100 kernel benchmark (PR vllm-project/vllm#24532, TP4, hidden 8192,
  32-256 tokens = 0.5-4 MB): its two-shot custom kernel measured 17, 18, 25, 26, 35, 42 us, this model
  gives 16, 18, 20, 23, 27, 31 us (within -26 %..-5 %: the price is not too high);
- NCCL: on the GPU, the table less its host part (the table's floor less the device latency),
  never below the device latency plus the ring bytes at the achieved bandwidth, in a graph and in an
  eager step alike: in an eager step the host part is NCCL's dispatch, which the host does while the
  GPU still runs the kernels before it (the step model counts it with the launches, `model.py`).
  Only a launch-bound step (the host behind the GPU) waits for it, as Vidur's back-to-back profile did.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AllReduce:
    """Seconds of one all-reduce of n bytes, for one (GPU, node type, worker count)."""

    sizes: tuple[float, ...]
    seconds: tuple[float, ...]

    def __call__(self, nbytes: float) -> float:
        sizes, seconds = self.sizes, self.seconds
        if nbytes <= sizes[-1] or len(sizes) < 2:
            return float(np.interp(nbytes, sizes, seconds))
        slope = (seconds[-1] - seconds[-2]) / (sizes[-1] - sizes[-2])
        return seconds[-1] + (nbytes - sizes[-1]) * slope

    def scaled(self, size_factor: float) -> AllReduce:
        """The table of a link `1 / size_factor` times as fast (a message of n bytes costs what
        n x size_factor bytes cost here)."""
        return AllReduce(tuple(s / size_factor for s in self.sizes), self.seconds)


def ring_factor(workers: int) -> float:
    return 2 * (workers - 1) / workers


def pick(tables: dict[str, list[list[float]]], workers: int) -> AllReduce:
    """The table for `workers` GPUs from {workers: [[bytes, seconds], ...]}: exact, or the nearest
    worker count with its sizes scaled by the ratio of ring factors."""
    counts = sorted(int(w) for w in tables)
    nearest = min(counts, key=lambda c: (abs(c - workers), -c))
    table = tables[str(nearest)]
    found = AllReduce(tuple(float(s) for s, _ in table), tuple(float(t) for _, t in table))
    return found if nearest == workers else found.scaled(ring_factor(workers) / ring_factor(nearest))


DEVICE_FLOOR_MAX_BYTES = 64 * 1024
"""Messages small enough that their all-reduce time is latency only (`bench/vidur.allreduce_device_latency`)."""
CUSTOM_MAX_BYTES = 8 * 1024 * 1024
"""vLLM's `CustomAllreduce(max_size=8192 * 1024)`: larger messages go to NCCL."""
CUSTOM_WORLD_SIZES = (2, 4, 6, 8)
"""`CustomAllreduce._SUPPORTED_WORLD_SIZES`."""


def custom_capable(topology: str, workers: int) -> bool:
    """Whether vLLM enables its custom all-reduce for `workers` GPUs of this node type: fully
    NVLink-connected (NVSwitch, or an MI300X-style fully linked node), or a pair with peer access."""
    if workers not in CUSTOM_WORLD_SIZES:
        return False
    return topology == "nvswitch" or (topology == "pairwise" and workers == 2)


def one_shot(workers: int, nbytes: float) -> bool:
    """vLLM's kernel choice (`REDUCE_CASE` in `custom_all_reduce.cuh`)."""
    return workers == 2 or (workers <= 4 and nbytes < 512 * 1024) or (workers <= 8 and nbytes < 256 * 1024)


def achieved_bandwidth(tables: dict[str, dict[str, list[list[float]]]]) -> float:
    """Per-GPU NVLink bytes/s: the largest NCCL ring bus bandwidth `2 (n-1)/n x dsize/dt` between the
    two largest sizes of any of the GPU's tables (node type -> workers -> table), where latency no
    longer counts. A GPU has the same NVLink ports in either node type, so the best table is the
    closest to what its links carry; slower ones hold NCCL's own losses (Vidur's A100: 175-187 GB/s on
    NVSwitch, 200 GB/s for a linked pair; H100: 299-366 GB/s on NVSwitch)."""
    best = 0.0
    for by_workers in tables.values():
        for workers, table in by_workers.items():
            if int(workers) < 2 or len(table) < 2:
                continue
            (s0, t0), (s1, t1) = table[-2], table[-1]
            if t1 > t0:
                best = max(best, ring_factor(int(workers)) * (s1 - s0) / (t1 - t0))
    return best


@dataclass(frozen=True)
class TensorParallelAllReduce:
    """One all-reduce of a TP group, priced the way vLLM would run it (module docstring)."""

    nccl: AllReduce
    workers: int
    custom: bool
    """Whether vLLM's custom kernel is enabled for this group (`custom_capable`)."""
    latency: float
    """Device-side seconds per synchronising stage."""
    bandwidth: float
    """Achieved per-GPU NVLink bytes/s."""
    memory_bandwidth: float
    """HBM bytes/s, for the eager copy into the custom kernel's registered buffer."""

    @property
    def host_floor(self) -> float:
        """The part of the NCCL table's small-size floor that is host dispatch."""
        return max(self.nccl.seconds[0] - self.latency, 0.0)

    def uses_custom(self, nbytes: float) -> bool:
        return self.custom and nbytes < CUSTOM_MAX_BYTES

    def __call__(self, nbytes: float, graph: bool) -> float:
        """Seconds on the GPU; `graph`: inside a CUDA graph (the custom kernel's eager copy into its buffer)."""
        n = self.workers
        if self.uses_custom(nbytes):
            if one_shot(n, nbytes):
                seconds = self.latency + (n - 1) * nbytes / self.bandwidth
            else:
                seconds = 2 * self.latency + 2 * (n - 1) / n * nbytes / self.bandwidth
            return seconds if graph else seconds + 2 * nbytes / self.memory_bandwidth
        return max(self.nccl(nbytes) - self.host_floor, self.latency + ring_factor(n) * nbytes / self.bandwidth)
