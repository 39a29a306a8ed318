"""The event loop every serving process runs on: uvloop's where it is installed (as vLLM's API server runs), else
asyncio's own (the collector's settings for a serving process are `aisim.collector.settle_garbage_collector`).

uvloop's loop, transports and timers are written in C (libuv). Measured with `bench/serve_scale.py` on a
split server (`--api-server-count 2`, 3 interleaved rounds), non-streaming chat cost 310 CPU us per request
against 367 on asyncio's loop. `AISIM_EVENT_LOOP=asyncio` picks asyncio's loop, for a comparison or for a bug
that only one loop shows.
"""

from __future__ import annotations

import asyncio
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

