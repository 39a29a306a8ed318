"""The event kernel: ordering, cancellation, failures, and the two clocks."""

from __future__ import annotations

import asyncio
import time

import pytest

from aisim.engine.kernel import (
    LATE,
    NORMAL,
    URGENT,
    Kernel,
    RealTimeClock,
    VirtualClock,
)


def test_events_run_in_time_then_priority_then_insertion_order() -> None:
    kernel = Kernel()
    seen: list[str] = []
    kernel.at(10, lambda: seen.append("b-normal"), NORMAL)
    kernel.at(10, lambda: seen.append("c-late"), LATE)
    kernel.at(10, lambda: seen.append("a-urgent"), URGENT)
    kernel.at(10, lambda: seen.append("b-normal-2"), NORMAL)
    kernel.at(5, lambda: seen.append("first"))
    VirtualClock(kernel).run()
    assert seen == ["first", "a-urgent", "b-normal", "b-normal-2", "c-late"]
    assert kernel.now == 10


def test_handlers_schedule_follow_ups_and_cancelled_events_do_not_run() -> None:
    kernel = Kernel()
    seen: list[int] = []

    def tick() -> None:
        seen.append(kernel.now)
        if kernel.now < 30:
            kernel.after(10, tick)

    kernel.at(0, tick)
    kernel.at(15, lambda: seen.append(-1)).cancel()
    VirtualClock(kernel).run()
    assert seen == [0, 10, 20, 30]


def test_run_until_stops_and_advances_the_clock() -> None:
    kernel = Kernel()
    seen: list[int] = []
    for t in (5, 15, 25):
        kernel.at(t, lambda t=t: seen.append(t))
    VirtualClock(kernel).run(until=20)
    assert seen == [5, 15] and kernel.now == 20
    VirtualClock(kernel).run()
    assert seen == [5, 15, 25]


def test_scheduling_in_the_past_is_refused_and_failures_propagate() -> None:
    kernel = Kernel()
    kernel.at(10, lambda: None)
    VirtualClock(kernel).run()
    with pytest.raises(ValueError, match="before now"):
        kernel.at(5, lambda: None)
    kernel.at(20, lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        VirtualClock(kernel).run()


def test_kernels_do_not_share_sequence_counters() -> None:
    first, second = Kernel(), Kernel()
    order: list[str] = []
    first.at(1, lambda: order.append("x"))
    second.at(1, lambda: order.append("y"))
    second.at(1, lambda: order.append("z"))
    VirtualClock(second).run()
    VirtualClock(first).run()
    assert order == ["y", "z", "x"]


def test_real_time_clock_never_runs_an_event_early_and_accepts_injected_work() -> None:
    """An event at 60 ms runs no earlier than its early window allows (`EARLY_S`, the timer resolution the clock
    runs ahead by on purpose), measured from before the clock's origin; work injected meanwhile runs at once."""
    from aisim.engine.kernel import EARLY_S

    async def scenario() -> tuple[list[tuple[str, int]], float]:
        kernel = Kernel()
        started = time.monotonic()  # before the clock's origin: a stall between the two must not look early
        clock = RealTimeClock(kernel, speed=1.0)
        seen: list[tuple[str, int]] = []
        kernel.at(60_000_000, lambda: seen.append(("timed", kernel.now)))
        runner = asyncio.create_task(clock.run())
        await asyncio.sleep(0.01)
        clock.inject(lambda: seen.append(("injected", kernel.now)))
        while len(seen) < 2:
            await asyncio.sleep(0.005)
        elapsed = time.monotonic() - started
        clock.stop()
        await runner
        return seen, elapsed

    seen, elapsed = asyncio.run(scenario())
    assert [name for name, _ in seen] == ["injected", "timed"]
    assert seen[0][1] >= 10_000_000 and seen[1][1] == 60_000_000
    assert elapsed >= 0.06 - EARLY_S  # (failed at 0.05998 s when measured from after the origin, with no window)


def test_events_closer_than_the_early_window_do_not_pull_each_other_ahead() -> None:
    """Events 0.1 ms apart over 40 ms: each runs at most EARLY_S before its time on the wall clock (a
    horizon measured from the last event run would let the whole run go at once)."""
    from aisim.engine.kernel import EARLY_S

    async def scenario() -> list[float]:
        kernel = Kernel()
        started = time.monotonic()  # before the clock's own origin: a stall between the two must not look early
        clock = RealTimeClock(kernel, speed=1.0)
        early: list[float] = []
        for k in range(1, 401):
            kernel.at(k * 100_000, lambda k=k: early.append(k * 1e-4 - (time.monotonic() - started)))
        runner = asyncio.create_task(clock.run())
        while len(early) < 400:
            await asyncio.sleep(0.002)
        clock.stop()
        await runner
        return early

    early = asyncio.run(scenario())
    assert max(early) <= EARLY_S + 0.0002  # slowness makes events late, never early


def test_work_injected_from_inside_an_event_runs_after_it_not_inside_it() -> None:
    """A stream's listener runs on the engine's turn and may abort its request (`inject`): that work must
    wait for the event under way to end, or an engine would be re-entered halfway through a step."""
    async def scenario() -> list[str]:
        kernel = Kernel()
        clock = RealTimeClock(kernel, speed=1.0)
        order: list[str] = []

        def step() -> None:
            order.append("step begins")
            clock.inject(lambda: order.append("injected"))
            order.append("step ends")

        clock.inject(step)
        return order

    assert asyncio.run(scenario()) == ["step begins", "step ends", "injected"]


def test_speed_factor_compresses_wall_time() -> None:
    async def scenario() -> float:
        kernel = Kernel()
        clock = RealTimeClock(kernel, speed=100.0)
        done = asyncio.Event()
        kernel.at(2_000_000_000, done.set)
        runner = asyncio.create_task(clock.run())
        started = time.monotonic()
        await asyncio.wait_for(done.wait(), timeout=10)
        clock.stop()
        await runner
        return time.monotonic() - started

    assert asyncio.run(scenario()) >= 0.02  # 2 s of virtual time at 100x is 20 ms of wall time, never less


def test_a_paused_clock_runs_nothing_ahead_of_the_paused_instant() -> None:
    """Paused, virtual time stands still: an event 3 ms on stays pending (the early window, 5 ms at speed 10,
    used to let it run; the TUI's ended runs moved past their end this way)."""
    async def scenario() -> list[int]:
        kernel = Kernel()
        clock = RealTimeClock(kernel, speed=10.0)
        clock.pause()
        ran: list[int] = []
        kernel.at(3_000_000, lambda: ran.append(kernel.now))
        runner = asyncio.create_task(clock.run())
        clock.step(0)  # wakes the clock task at the paused instant
        await asyncio.sleep(0.05)
        clock.stop()
        await runner
        return ran

    assert asyncio.run(scenario()) == []
