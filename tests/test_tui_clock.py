"""The real-time clock's controls the TUI uses: pause, resume, single step, change of speed.

Virtual time is checked against itself (before / after a control), never against an absolute wall
time: a paused clock must not move, a step must move it by exactly its delta and run what fell due.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from aisim.engine.kernel import Kernel, RealTimeClock

MS = 1_000_000


def test_pause_freezes_virtual_time_and_resume_continues_from_there() -> None:
    async def drive() -> None:
        clock = RealTimeClock(Kernel(), speed=100.0)
        task = asyncio.get_running_loop().create_task(clock.run())
        await asyncio.sleep(0.02)
        clock.pause()
        frozen = clock.virtual_now()
        assert frozen > 0
        await asyncio.sleep(0.03)
        assert clock.virtual_now() == frozen
        clock.resume()
        resumed_wall = time.monotonic()
        await asyncio.sleep(0.02)
        elapsed = time.monotonic() - resumed_wall
        moved = clock.virtual_now() - frozen
        assert 0 < moved <= (elapsed + 0.005) * 100 * 1e9  # from where it stood, not from the wall clock
        clock.stop()
        await task

    asyncio.run(drive())


def test_step_moves_exactly_and_runs_what_falls_due() -> None:
    async def drive() -> None:
        kernel = Kernel()
        ran: list[int] = []
        clock = RealTimeClock(kernel, speed=1.0)
        clock.pause()
        start = clock.virtual_now()
        kernel.at(start + 50 * MS, lambda: ran.append(kernel.now))
        kernel.at(start + 150 * MS, lambda: ran.append(kernel.now))
        task = asyncio.get_running_loop().create_task(clock.run())
        await asyncio.sleep(0.01)
        assert ran == []
        clock.step(100 * MS)
        await asyncio.sleep(0.01)
        assert clock.virtual_now() == start + 100 * MS
        assert ran == [start + 50 * MS]  # at its own time; the later event waits
        clock.step(100 * MS)
        await asyncio.sleep(0.01)
        assert ran == [start + 50 * MS, start + 150 * MS] and clock.virtual_now() == start + 200 * MS
        clock.resume()
        clock.step(100 * MS)  # only while paused
        assert clock.virtual_now() < start + 300 * MS
        clock.stop()
        await task

    asyncio.run(drive())


def test_set_speed_keeps_virtual_time_continuous() -> None:
    async def drive() -> None:
        clock = RealTimeClock(Kernel(), speed=1000.0)
        await asyncio.sleep(0.02)
        started = time.monotonic()
        before = clock.virtual_now()
        clock.set_speed(1.0)
        after = clock.virtual_now()
        wall = time.monotonic() - started
        # no jump: at most the wall time between the two readings at the old speed
        assert before <= after <= before + int(wall * 1000 * 1e9) + MS
        assert clock.speed == 1.0
        with pytest.raises(ValueError, match="positive"):
            clock.set_speed(0)

    asyncio.run(drive())
