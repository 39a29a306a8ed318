"""Where the TUI's records come from: a simulation in this process, or a server's `/admin/events`.

`LocalSource` runs the simulation on the real-time clock as a task of the app's own event loop
(Textual's), so the engine and the UI share one thread and no lock: between frames the clock runs
every event that fell due. `AttachSource` reads the admin event stream of a running `aisim serve`;
it can only watch (pause, speed and faults belong to the server).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import queue
import threading
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..engine import Feed, RealTimeClock, Simulation, VirtualClock

STEP_NS = 100_000_000
"""How far one single step moves virtual time (0.1 s)."""
SPEEDS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)


class Source(Protocol):
    """What the app needs from a source of records."""

    controllable: bool
    label: str

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def poll(self, sample: bool = True) -> list[dict[str, Any]]: ...
    def now(self) -> int: ...
    @property
    def paused(self) -> bool: ...
    @property
    def speed(self) -> float: ...
    @property
    def ended(self) -> bool: ...
    def toggle_pause(self) -> None: ...
    def step(self) -> None: ...
    def faster(self, up: bool) -> None: ...
    def fire(self, name: str) -> None: ...


class LocalSource:
    """A simulation in this process, paced by a `RealTimeClock` (see the module docstring).

    `startup` replaces starting the clock task (`aisim tui --serve` starts the server, which runs it);
    `stop_at` (the scenario's end) or `drains` (no end but when its workload is done) pause the clock
    there, so the final state stays on screen."""

    controllable = True

    def __init__(self, sim: Simulation, clock: RealTimeClock | None = None, speed: float = 1.0, paused: bool = False,
                 startup: Callable[[], Awaitable[None]] | None = None, stop_at: int | None = None,
                 drains: bool = False) -> None:
        self.sim = sim
        self.clock = clock or RealTimeClock(sim.kernel, speed)
        self.feed = Feed(sim)
        self.label = sim.scenario.metadata.name
        self.stop_at = stop_at
        self.drains = drains
        self._drained = False
        self._startup = startup
        self._task: asyncio.Task[None] | None = None
        if paused:
            self.clock.pause()

    def run_to(self, time_ns: int) -> None:
        """Advance the simulation on the virtual clock to `time_ns` (snapshot tests: fixed instants
        whatever the wall clock does); the real-time clock then stands there, paused."""
        self.clock.pause()
        VirtualClock(self.sim.kernel).run(time_ns)
        self.clock.step(0)

    async def start(self) -> None:
        if self._startup is not None:
            await self._startup()
        else:
            self._task = asyncio.get_running_loop().create_task(self.clock.run())
        if self.stop_at is not None:
            self.sim.kernel.observe(max(self.stop_at, self.sim.kernel.now), self.clock.pause)

    async def stop(self) -> None:
        self.clock.stop()
        if self._task is not None:
            await self._task
            self._task = None

    def poll(self, sample: bool = True) -> list[dict[str, Any]]:
        if self.drains and not self._drained and self.sim.kernel.peek() is None:
            self._drained = True  # the workload is done: keep the last state on screen
            self.clock.pause()
        return self.feed.poll(self.now(), sample)

    def now(self) -> int:
        return self.clock.virtual_now()

    @property
    def paused(self) -> bool:
        return self.clock.paused

    @property
    def speed(self) -> float:
        return self.clock.speed

    @property
    def ended(self) -> bool:
        return self._drained or (self.stop_at is not None and self.sim.kernel.now >= self.stop_at)

    def toggle_pause(self) -> None:
        """Pause or resume; a run that has ended stays where it ended (resuming ran it past its end)."""
        if self.clock.paused and not self.ended:
            self.clock.resume()
        else:
            self.clock.pause()

    def step(self) -> None:
        """Pause (if running) and move virtual time on by `STEP_NS` (not past the run's end)."""
        self.clock.pause()
        if not self.ended:
            self.clock.step(STEP_NS)

    def faster(self, up: bool) -> None:
        """The next speed up or down the `SPEEDS` ladder."""
        current = self.clock.speed
        if up:
            chosen = next((s for s in SPEEDS if s > current), SPEEDS[-1])
        else:
            chosen = next((s for s in reversed(SPEEDS) if s < current), SPEEDS[0])
        self.clock.set_speed(chosen)

    def fire(self, name: str) -> None:
        """Start the catalogue's fault `name` now (at the clock's current instant)."""
        self.clock.inject(lambda: self.sim.fire_fault(name))


class AttachSource:
    """Records from `URL/admin/events` (server-sent events, one JSON batch of records per event).

    A daemon thread reads the stream with the standard library (the TUI layer imports no HTTP
    server library); `poll` takes what it has queued so far."""

    controllable = False

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url.rstrip("/") + "/admin/events"
        self.label = url
        self.token = token
        self._pending: queue.SimpleQueue[list[dict[str, Any]]] = queue.SimpleQueue()
        self._now = 0
        self._response: http.client.HTTPResponse | None = None
        self._closing = False
        self.error = ""
        """Why the stream ended ('' while it runs)."""

    async def start(self) -> None:
        threading.Thread(target=self._read, name="aisim-attach", daemon=True).start()

    def _read(self) -> None:
        headers = {"Accept": "text/event-stream"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            with urllib.request.urlopen(urllib.request.Request(self.url, headers=headers)) as response:
                self._response = response
                data: list[bytes] = []
                for line in response:
                    line = line.rstrip(b"\r\n")
                    if line.startswith(b"data:"):
                        data.append(line[5:].lstrip())
                    elif not line and data:
                        self._pending.put(json.loads(b"\n".join(data)))
                        data = []
            self.error = "the server closed the event stream"
        except urllib.error.HTTPError as error:
            self.error = f"{self.url}: HTTP {error.code}"
        except (OSError, ValueError, AttributeError) as error:  # AttributeError: closed by `stop` mid-read
            if not self._closing:
                self.error = f"{self.url}: {error}"

    async def stop(self) -> None:
        """Stop reading (the daemon thread ends with the stream, or with the process)."""
        self._closing = True
        if self._response is not None:
            with contextlib.suppress(Exception):
                self._response.close()

    def poll(self, sample: bool = True) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        while not self._pending.empty():
            records += self._pending.get()
        if records:
            self._now = max(self._now, int(records[-1].get("t_ns", 0)))
        return records

    def now(self) -> int:
        return self._now

    paused = False
    speed = 0.0
    ended = False

    def toggle_pause(self) -> None: ...
    def step(self) -> None: ...
    def faster(self, up: bool) -> None: ...
    def fire(self, name: str) -> None: ...
