"""The simulation on the real-time clock, for servers: submit a request now, follow its tokens.

The server runs `Live.run()` as a task on its asyncio loop. A handler calls `submit`, which
injects the arrival at the current virtual instant, and then either listens to the returned
`Call` (a stream: one ("token", time) per generated token, then ("finished" | "failed" |
"aborted", time), each handed over on the engine's turn) or awaits its end. `abort` is how a
handler whose client disconnected gives the request up: the engine frees its KV blocks at once.
Steps are planned one at a time here, so that every token is an event at its own instant.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from .kernel import RealTimeClock
from .request import Request
from .simulation import Simulation
from .workload import Arrival

END_EVENTS = frozenset({"finished", "failed", "aborted"})
T = TypeVar("T")


@dataclass
class Call:
    """One submitted request as its client sees it, and its watcher in the engine.

    Every token's time lands in `token_times`. A streaming client (`live_tokens`) listens
    (`listen`) and gets each token as it comes; otherwise the tokens come with the end, which is
    much cheaper. A client that only needs the end awaits `end()`.
    """

    arrival: Arrival
    live_tokens: bool = True
    events: deque[tuple[str, int]] = field(default_factory=deque)
    token_times: list[int] = field(default_factory=list)
    request: Request | None = None
    ending: tuple[str, int] | None = None
    """How and when the request ended (None while it runs)."""
    token_walls: list[float] = field(default_factory=list)
    """The wall-clock instant (`time.monotonic`) each token reached the call: what a server log measures."""
    ended_wall: float | None = None
    """The wall-clock instant the end reached the call (None while it runs)."""
    submitted_wall: float = 0.0
    """The wall-clock instant the request was handed to the engine (its arrival on the engine's clock)."""
    error: str = ""
    """The engine's error for a failed request whose engine runs in another process (`request` is None there)."""
    kept_blocks: list[int] | None = None
    """The KV blocks the request last held, when its arrival asked to keep them (a prefill for a remote decode):
    the engine's own list, or in an API server the engine core's copy, which comes with the end."""
    _ended: asyncio.Future[tuple[str, int]] | None = None
    _listener: Callable[[str, int], None] | None = None
    """Called with each event on the engine's turn (see `listen`); until it is set, `events` keeps them."""
    _delivering: bool = False

    def tokens(self, request: Request, times: Sequence[int]) -> None:
        """Tokens handed over together (a call that is not streamed learns of them at its end)."""
        if self.live_tokens:
            for time_ns in times:
                self("token", request, time_ns)
            return
        self.token_times.extend(times)
        self.token_walls.extend([time.monotonic()] * len(times))

    def __call__(self, event: str, request: Request, time_ns: int) -> None:
        if event == "token":
            self.token_times.append(time_ns)
            self.token_walls.append(time.monotonic())
            if not self.live_tokens:
                return
        elif event in END_EVENTS:
            self.ending = (event, time_ns)
            self.ended_wall = time.monotonic()
            if self._ended is not None and not self._ended.done():
                self._ended.set_result(self.ending)
        self.events.append((event, time_ns))
        self._deliver()

    def listen(self, listener: Callable[[str, int], None]) -> None:
        """Hand every event to `listener` as it happens, on the engine's turn (the events so far first): a
        streamed token then goes out with no hop through the event loop (no wake-up of the handler's task,
        no wait on the socket): a fifth less server CPU for 500 streams of 200 tokens than a queue the
        handler's task read, and no loop turn between a token's time and its write. The listener must not
        block; an event that arrives while it runs (it aborted the request, say) is handed over after it
        returns."""
        self._listener = listener
        self._deliver()

    def _deliver(self) -> None:
        if self._delivering or self._listener is None:
            return
        self._delivering = True
        try:
            while self.events:
                event, time_ns = self.events.popleft()
                self._listener(event, time_ns)
        finally:
            self._delivering = False

    async def end(self) -> tuple[str, int]:
        """Wait for the request's end: ("finished" | "failed" | "aborted", time)."""
        if self.ending is not None:
            return self.ending
        if self._ended is None:
            self._ended = asyncio.get_running_loop().create_future()
        return await self._ended


class Live:
    """A simulation paced against the wall clock."""

    def __init__(self, sim: Simulation, speed: float = 1.0) -> None:
        if sim.macro_steps:
            raise ValueError("a live simulation plans one step at a time: build it with macro_steps=False")
        self.sim = sim
        self.clock = RealTimeClock(sim.kernel, speed)
        self.started_wall = time.monotonic()
        """The wall-clock instant (`time.monotonic`) of virtual time 0, for logs that measure wall time."""

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
        call = Call(arrival, live_tokens, submitted_wall=time.monotonic())

        def arrive() -> None:
            call.request = self.sim.submit(arrival, call, live_tokens)
            call.kept_blocks = call.request.kept_blocks

        self.clock.inject(arrive)
        return call

    async def act(self, action: Callable[[Callable[[T], None]], None]) -> T:
        """Run `action` in the simulation now and wait for the result it passes to its callback
        (a model load that ends after its simulated load time, for example)."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        def resolve(result: T) -> None:  # the clock runs its events on this loop's thread
            if not future.done():
                future.set_result(result)

        self.clock.inject(lambda: action(resolve))
        return await future

    def abort(self, call: Call) -> None:
        """Give a request up (its client disconnected)."""
        def drop() -> None:
            if call.request is not None:
                self.sim.abort(call.request)

        self.clock.inject(drop)

