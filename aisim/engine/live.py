"""The simulation on the real-time clock, for servers: submit a request now, await its tokens.

The server runs `Live.run()` as a task on its asyncio loop. A handler calls `submit`, which
injects the arrival at the current virtual instant, and then iterates the returned `Call`'s
events: one ("token", time) per generated token, then ("finished" | "failed" | "aborted",
time). `abort` is how a handler whose client disconnected gives the request up: the engine
frees its KV blocks at once. Steps are planned one at a time here, so that every token is an
event at its own instant.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from typing import AsyncIterator

from .kernel import RealTimeClock
from .request import Request
from .simulation import Simulation
from .workload import Arrival

END_EVENTS = frozenset({"finished", "failed", "aborted"})


@dataclass
class Call:
    """One submitted request as its client sees it.

    Every token's time lands in `token_times`; the event queue carries each token too when the
    client streams (`live_tokens`), and otherwise only the end, which is much cheaper.
    """

    arrival: Arrival
    live_tokens: bool = True
    events: asyncio.Queue[tuple[str, int]] = field(default_factory=asyncio.Queue)
    token_times: list[int] = field(default_factory=list)
    request: Request | None = None

    def watch(self, event: str, request: Request, time_ns: int) -> None:
        if event == "token":
            self.token_times.append(time_ns)
            if not self.live_tokens:
                return
        self.events.put_nowait((event, time_ns))

    async def stream(self) -> AsyncIterator[tuple[str, int]]:
        """The request's events until its end (finished, failed or aborted)."""
        while True:
            event = await self.events.get()
            yield event
            if event[0] in END_EVENTS:
                return


class Live:
    """A simulation paced against the wall clock."""

    def __init__(self, sim: Simulation, speed: float = 1.0) -> None:
        if sim.macro_steps:
            raise ValueError("a live simulation plans one step at a time: build it with macro_steps=False")
        self.sim = sim
        self.clock = RealTimeClock(sim.kernel, speed)

    async def run(self) -> None:
        """Run the simulation until `stop`."""
        await self.clock.run()

    def stop(self) -> None:
        self.clock.stop()

    def now(self) -> int:
        """The current virtual time, in nanoseconds."""
        return self.clock.virtual_now()

    def submit(self, arrival: Arrival, live_tokens: bool = True) -> Call:
        """Let a request arrive now; its events come through the returned call (each token as it comes,
        or, with `live_tokens=False`, possibly all at the end, each with its own time)."""
        call = Call(arrival, live_tokens)

        def arrive() -> None:
            call.request = self.sim.submit(dataclasses.replace(arrival, time=self.sim.kernel.now), call.watch, live_tokens)

        self.clock.inject(arrive)
        return call

    def abort(self, call: Call) -> None:
        """Give a request up (its client disconnected)."""
        def drop() -> None:
            if call.request is not None:
                self.sim.abort(call.request)

        self.clock.inject(drop)

