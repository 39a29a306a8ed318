"""The event loop every serving process runs on: uvloop's where it is installed (as vLLM's API server runs), else
asyncio's own; and the garbage collector's settings for a long-running server (`settle_garbage_collector`).

uvloop's loop, transports and timers are written in C (libuv). Measured with `bench/serve_scale.py` on a
split server (`--api-server-count 2`, 3 interleaved rounds), non-streaming chat cost 310 CPU us per request
against 367 on asyncio's loop. `AISIM_EVENT_LOOP=asyncio` picks asyncio's loop, for a comparison or for a bug
that only one loop shows.
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    if os.environ.get("AISIM_EVENT_LOOP", "uvloop") != "asyncio":
        try:
            import uvloop
        except ImportError:  # not on Windows
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on `new_event_loop()`."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(main)


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
    gc.set_threshold(*GC_THRESHOLDS)


GC_THRESHOLDS = (2_000, 50, 50)
"""The serving processes' collector thresholds (`settle_garbage_collector`)."""
