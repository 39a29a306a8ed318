"""The cyclic garbage collector during a virtual run: fewer, cheaper collections.

A headless run makes millions of short-lived objects (plans, batches, small arrays) and few cycles,
while the scenario, the trace and the requests it loaded stay alive throughout. CPython's default
collector runs a young collection every 700 allocations and, now and then, a full one that walks
every live object. `quiet()` moves what is alive at the start out of the collector's sight
(`gc.freeze`) and raises the young threshold, then restores both: the run's results do not depend on
when the collector runs, only its CPU time does (about 7 % of `aisim run scenarios/azure-conv.yaml`,
measured with `bench/run_speed.py`). Garbage in cycles is still collected, in larger batches.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 100_000
"""Allocations between young collections during a run (CPython's default: 700). At a few hundred
bytes an object this bounds the cyclic garbage kept waiting to tens of megabytes."""


@contextmanager
def quiet() -> Iterator[None]:
    """Collect less often while the block runs (what is alive when it starts is never collected then)."""
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
