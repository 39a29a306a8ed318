"""All-reduce time by message size: the NCCL tables Vidur measured, interpolated.

vLLM's tensor parallelism all-reduces each layer's attention output and MLP output (two per
layer, `hidden x tokens x 2` bytes each), the embedding's output once, and gathers the logits.
The tables (`calibrated.json`, `allreduce`) hold, per profiled GPU, node type (`nvswitch`: every
GPU pair at full NVLink bandwidth, Vidur's "dgx"; `pairwise`: GPUs linked in pairs) and worker
count, the median time over log-spaced size bins made monotone (`bench/vidur.py`). A size between
two bins is interpolated linearly; beyond the last bin the last slope continues.

A worker count the table lacks takes the nearest one, its size scaled by the ring factor
2 (n-1)/n; a GPU without a table takes its base GPU's table with the sizes scaled by the ratio
of their link bandwidths (`derived.py`), which keeps the latency floor and scales the bandwidth part.
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
