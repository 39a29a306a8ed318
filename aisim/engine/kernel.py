"""The event kernel: a heap of (time, priority, sequence, handler) on integer nanoseconds.

Ordering is owned by the kernel instance (SimPy's discipline): ties on time break on the
priority, then on a per-kernel sequence counter, so runs are deterministic and two kernels in
one process never influence each other. Handlers are plain callables that schedule their
follow-ups. A handler that raises stops the run: failures never pass unnoticed.

Two clocks drive the same kernel behind one interface: `VirtualClock` runs events as fast as the
CPU allows; `RealTimeClock` paces them against asyncio's loop at a speed factor, and lets
outside code (a server handler) inject work "now".

Observers (`Kernel.observe`: telemetry samplers) sit in a heap of their own. An observer runs after
every ordinary event of its instant and before any later one, and never keeps a run alive: a
virtual run that drains ends with its last ordinary event, so sampling cannot change when (or how)
a run ends.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Callable
from typing import NewType

from .. import collector

Priority = NewType("Priority", int)
URGENT = Priority(0)
"""Control events that must run before ordinary ones at the same instant (stop, faults)."""
NORMAL = Priority(1)
"""Ordinary events."""
LATE = Priority(2)
"""Events that observe the state after everything else at the same instant (samplers)."""

Handler = Callable[[], None]


class EventHandle:
    """What `schedule` returns: lets the scheduler of an event cancel it."""

    __slots__ = ("cancelled", "handler", "time")

    def __init__(self, time_ns: int, handler: Handler) -> None:
        self.time = time_ns
        self.handler = handler
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Kernel:
    """The discrete-event core: a clock value and a heap of pending events."""

    def __init__(self) -> None:
        self.now = 0
        self._queue: list[tuple[int, int, int, EventHandle]] = []
        self._sequence = itertools.count()
        self.processed = 0
        self._observers: list[tuple[int, int, EventHandle]] = []

    def at(self, time_ns: int, handler: Handler, priority: Priority = NORMAL) -> EventHandle:
        """Run `handler` at `time_ns` (not before now)."""
        if time_ns < self.now:
            raise ValueError(f"cannot schedule at {time_ns} ns, before now ({self.now} ns)")
        handle = EventHandle(time_ns, handler)
        heapq.heappush(self._queue, (time_ns, priority, next(self._sequence), handle))
        return handle

    def after(self, delay_ns: int, handler: Handler, priority: Priority = NORMAL) -> EventHandle:
        """Run `handler` `delay_ns` from now."""
        return self.at(self.now + delay_ns, handler, priority)

    def observe(self, time_ns: int, handler: Handler) -> EventHandle:
        """Run `handler` at `time_ns` as an observer (see the module docstring); not counted in `processed`."""
        if time_ns < self.now:
            raise ValueError(f"cannot observe at {time_ns} ns, before now ({self.now} ns)")
        handle = EventHandle(time_ns, handler)
        heapq.heappush(self._observers, (time_ns, next(self._sequence), handle))
        return handle

    def next_observation(self) -> int | None:
        """Time of the next live observer, or None."""
        observers = self._observers
        while observers and observers[0][2].cancelled:
            heapq.heappop(observers)
        return observers[0][0] if observers else None

    def observe_before(self, time_ns: int) -> None:
        """Run the observers due strictly before `time_ns`, in time order (the clock never goes back)."""
        observers = self._observers
        while observers and observers[0][0] < time_ns:
            when, _, handle = heapq.heappop(observers)
            if handle.cancelled:
                continue
            self.now = max(self.now, when)
            handle.handler()

    def peek(self) -> int | None:
        """Time of the next live event, or None when nothing is pending."""
        queue = self._queue
        while queue and queue[0][3].cancelled:
            heapq.heappop(queue)
        return queue[0][0] if queue else None

    def step(self) -> None:
        """Run the next live event."""
        time_ns, _, _, handle = heapq.heappop(self._queue)
        if handle.cancelled:
            return
        self.now = time_ns
        self.processed += 1
        handle.handler()

    def advance(self, time_ns: int) -> None:
        """Move the clock forward to `time_ns` with no event (the end of a run, real time passing)."""
        self.now = max(self.now, time_ns)


class VirtualClock:
    """Runs a kernel as fast as the CPU allows."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def run(self, until: int | None = None, progress: Callable[[int], None] | None = None) -> None:
        """Run events up to and including time `until` (or until none are left)."""
        kernel = self.kernel
        observers = kernel._observers  # the loop's one extra check per event
        queue, pop = kernel._queue, heapq.heappop
        check = 0
        with collector.quiet():
            while True:  # `peek` and `step`, inlined: this loop runs once per event of a run
                while queue and queue[0][3].cancelled:
                    pop(queue)
                if not queue or (until is not None and queue[0][0] > until):
                    break
                if observers and observers[0][0] < queue[0][0]:
                    kernel.observe_before(queue[0][0])
                time_ns, _, _, handle = pop(queue)
                if not handle.cancelled:
                    kernel.now = time_ns
                    kernel.processed += 1
                    handle.handler()
                check += 1
                if progress is not None and check % 4096 == 0:
                    progress(kernel.now)
        kernel.observe_before((kernel.now if until is None else max(until, kernel.now)) + 1)
        if until is not None:
            kernel.advance(until)


EARLY_S = 0.0005
"""How early (wall seconds) the real-time clock may run an event. The event loop's timers wake at a
millisecond's resolution (epoll rounds its timeout up), so waiting for an event due sooner makes it
late by up to a millisecond. Running the events due within half a millisecond at once, and sleeping
for the others, keeps every event within half a millisecond of its time, early or late. An event's
virtual time is still its own (the timeline stays exact); a request that arrives meanwhile is
stamped at the clock's virtual time."""


class RealTimeClock:
    """Paces a kernel against asyncio's loop: virtual time = (wall time - start) x speed."""

    def __init__(self, kernel: Kernel, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError(f"speed must be positive, not {speed}")
        self.kernel = kernel
        self.speed = speed
        self._early = int(EARLY_S * speed * 1e9)
        self._start_wall = time.monotonic()
        self._start_virtual = kernel.now
        self._wake = asyncio.Event()
        self._stopped = False
        self._sleeping_until: int | None = None
        """Virtual time the clock task sleeps until (None: until woken)."""
        self.paused = False
        """Whether virtual time stands still (a watcher paused it); events due by then still run."""
        self._running = False
        """Whether events are being run (an `inject` from inside one only schedules)."""

    def virtual_now(self) -> int:
        """The virtual time that corresponds to this wall-clock instant (never behind the last event run)."""
        return max(self.kernel.now, self._wall_virtual())

    def _wall_virtual(self) -> int:
        """Virtual time from the wall clock alone. The events due are those up to this plus `EARLY_S`: measured
        from the last event run instead, each event run early would move the horizon on, and events a little
        apart would all run at once, far ahead of their time."""
        if self.paused:
            return self._start_virtual
        return self._start_virtual + int((time.monotonic() - self._start_wall) * self.speed * 1e9)

    def _rebase(self) -> None:
        """Start counting from this instant, so that a change of speed or a pause leaves virtual time where it is."""
        self._start_virtual = self._wall_virtual()
        self._start_wall = time.monotonic()

    def set_speed(self, speed: float) -> None:
        """Run at `speed` virtual seconds per wall second from now on."""
        if speed <= 0:
            raise ValueError(f"speed must be positive, not {speed}")
        self._rebase()
        self.speed = speed
        self._early = int(EARLY_S * speed * 1e9)
        self._wake.set()

    def pause(self) -> None:
        """Stop virtual time (requests injected meanwhile arrive at the paused instant and wait)."""
        if not self.paused:
            self._rebase()
            self.paused = True
            self._wake.set()

    def resume(self) -> None:
        """Let virtual time run again from where it stood."""
        if self.paused:
            self.paused = False
            self._start_wall = time.monotonic()
            self._wake.set()

    def step(self, delta_ns: int) -> None:
        """While paused, move virtual time forward by `delta_ns` and run what falls due."""
        if self.paused:
            self._start_virtual = self.virtual_now() + delta_ns
            self._wake.set()

    def inject(self, handler: Handler, priority: Priority = NORMAL) -> EventHandle:
        """Schedule work at the current instant from outside the kernel (a request arriving), and run
        every event already due at once, rather than on the clock task's next turn. Called from an
        event's own callback (a stream's listener aborting its request), it only schedules: the run
        under way picks the work up, and events never run inside one another."""
        if self._running:
            return self.kernel.at(self.kernel.now, handler, priority)
        self.kernel.advance(self.virtual_now())
        handle = self.kernel.at(self.kernel.now, handler, priority)
        next_time = self._run_due()
        if next_time is not None and (self._sleeping_until is None or next_time < self._sleeping_until):
            self._wake.set()  # the clock task must wake earlier than it planned
        return handle

    def _run_due(self) -> int | None:
        """Run the events whose time has come; the time of the next one, or None."""
        kernel = self.kernel
        self._running = True
        early = 0 if self.paused else self._early  # paused, virtual time stands still: nothing is due ahead of it
        horizon = self._wall_virtual() + early
        try:
            while True:
                next_time = kernel.peek()
                watch = kernel.next_observation()
                observing = watch is not None and (next_time is None or watch < next_time)
                upcoming = watch if observing else next_time
                if upcoming is None:
                    return None
                if upcoming > horizon:  # not due when the run began; the wall clock may have moved on since
                    horizon = self._wall_virtual() + early
                    if upcoming > horizon:
                        return upcoming
                if observing:
                    kernel.observe_before(upcoming + 1)
                else:
                    kernel.step()
        finally:
            self._running = False

    def stop(self) -> None:
        """Make `run` return."""
        self._stopped = True
        self._wake.set()

    async def run(self) -> None:
        """Run events when their virtual time comes, until `stop`."""
        loop = asyncio.get_running_loop()
        whole_ms = not isinstance(loop, asyncio.BaseEventLoop)
        """A loop other than asyncio's own (uvloop: libuv) counts its timers in whole milliseconds from its time
        truncated to the millisecond, so a timer may fire up to 1.5 ms before it is due, and the clock would
        spin until the early window opened (twice the engine core's CPU for 500 streams). Such a loop is asked
        for the window's first millisecond boundary instead, which it keeps exactly: the loop's time is the
        monotonic clock (CLOCK_MONOTONIC) in both."""
        while not self._stopped:
            next_time = self._run_due()
            self._wake.clear()
            self._sleeping_until = next_time
            if next_time is None or self.paused:
                await self._wake.wait()
                continue
            # A timer that sets the wake event (cheaper than `wait_for`, which wraps each wait in a task), set
            # for the start of the event's early window: the selector rounds its timeout up to the next
            # millisecond, so a timer set for the event's own time would make it up to a millisecond late.
            wait_s = max(next_time - self._early - self._wall_virtual(), 0) / 1e9 / self.speed
            if whole_ms:  # the first millisecond boundary of the window (see `whole_ms` above)
                alarm = loop.call_at(math.ceil((time.monotonic() + wait_s) * 1000) / 1000, self._wake.set)
            else:
                alarm = loop.call_later(wait_s, self._wake.set)
            await self._wake.wait()
            alarm.cancel()
