"""The cyclic garbage collector's settings, for every aisim process: the one place that sets them.

A virtual run (`quiet`) and a server (`settle_garbage_collector`) both keep what they built at the start
alive to the end, so both move it out of the collector's sight (`gc.freeze`) and full collections no longer
walk it. They differ in the young threshold, for opposite reasons: a run wants few collections (CPU time), a
server short ones (each pause delays every stream in flight).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 100_000
"""Allocations between young collections during a run (CPython's default: 700). At a few hundred
bytes an object this bounds the cyclic garbage kept waiting to tens of megabytes."""

SERVING_THRESHOLDS = (2_000, 50, 50)
"""The serving processes' collector thresholds (`settle_garbage_collector`)."""


@contextmanager
def quiet() -> Iterator[None]:
    """Collect less often while the block runs (what is alive when it starts is never collected then).

    A headless run makes millions of short-lived objects (plans, batches, small arrays) and few cycles,
    while the scenario, the trace and the requests it loaded stay alive throughout. CPython's default
    collector runs a young collection every 700 allocations and, now and then, a full one that walks
    every live object. The run's results do not depend on when the collector runs, only its CPU time does
    (about 7 % of `aisim run scenarios/azure-conv.yaml`, measured with `bench/run_speed.py`). Garbage in
    cycles is still collected, in larger batches."""
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def settle_garbage_collector() -> None:
    """Tune the collector for a long-running server. What start-up built (the scenario, the simulation,
    imported modules) lives as long as the process, so it leaves the collector's generations (`gc.freeze`) and
    full collections no longer walk it.

    A young collection runs every 2,000 allocations of tracked objects (CPython's default: 700), a middle one
    every 50 of those. Each young collection walks what was allocated since the last one, and everything a
    request in flight holds survives it, so its pause grows with the threshold: at 20,000, 500 concurrent streams
    saw pauses of 11-19 ms (wall time, `gc.callbacks`, split server on one core), each delaying every token of
    the process's streams at once (a p99 gap error of 10-20 ms); at 2,000, pauses of 4-6 ms and p99s of
    9-12 ms (`bench/serve_scale.py --part streams`). Throughput did not move: 245 against 249 CPU us per
    non-streaming chat request (3 interleaved rounds), where CPython's default thresholds cost about 9 %."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*SERVING_THRESHOLDS)
