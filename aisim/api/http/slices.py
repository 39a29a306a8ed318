"""Large handler work done in slices, so that no request holds the event loop for more than a few ms.

A request within the caps (`server.requestLimits`) can still be thousands of prompts or inputs: its handler
walks them with `Slices.turn()` between items, which gives the loop back (one `asyncio.sleep(0)`) once the
handler has held it for `SLICE_S`. `/health`, the engine's clock and every other request run in between.
Many requests arriving at once are the same problem spread over handlers: `Intake` lets a few of them start
per loop turn.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

SLICE_S = 0.002
"""Longest a handler keeps the loop between turns."""


class Slices:
    """A handler's share of the loop: `await turn()` after each item of a large piece of work."""

    def __init__(self, slice_s: float = SLICE_S) -> None:
        self.slice_s = slice_s
        self._since = time.perf_counter()

    async def turn(self) -> None:
        now = time.perf_counter()
        if now - self._since >= self.slice_s:
            await asyncio.sleep(0)
            self._since = time.perf_counter()


PER_TURN = 4
"""Generating requests that begin their work (parse, plan the answer, submit) in one loop turn. Measured with
`bench/serve_scale.py --part streams` (500 streams arriving together, split x2 on one core): at 8, a p99 gap error
of 4.0-9.0 ms after each stream's first 10 tokens (4 runs); at 4, 4.4-5.0 ms (3 runs), the burst taking as long
(the last first token 330-370 ms after the first either way) and non-streaming chat 2-3 % more CPU per request."""


class Intake:
    """New generating requests' share of the loop. A handler's start (its body parsed and checked, its answer
    made, its submission) costs a few hundred microseconds; 500 streams that arrive together used to start in
    one loop turn, so every token of the streams already running waited for all of them (gap errors of up to
    100-150 ms in the burst). With `await intake.enter()` at most `PER_TURN` start per loop turn, in their order
    of arrival; the engine's events (tokens) are handled between turns."""

    def __init__(self, per_turn: int = PER_TURN) -> None:
        self.per_turn = per_turn
        self.started = 0
        """Requests started in this loop turn."""
        self.waiting: deque[asyncio.Future[None]] = deque()
        self._turn_ends = False

    async def enter(self) -> None:
        """Return when this request may start (at once, when this turn has room and no one is waiting)."""
        if not self.waiting and self.started < self.per_turn:
            self._start()
            return
        future = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        self._end_turn_soon()
        await future

    def _start(self) -> None:
        self.started += 1
        self._end_turn_soon()

    def _end_turn_soon(self) -> None:
        if not self._turn_ends:
            self._turn_ends = True
            asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        """A new loop turn: the next `per_turn` waiting requests start in it."""
        self._turn_ends = False
        self.started = 0
        while self.waiting and self.started < self.per_turn:
            future = self.waiting.popleft()
            if not future.done():  # (its handler was cancelled meanwhile)
                future.set_result(None)
                self._start()
