"""Large handler work done in slices, so that no request holds the event loop for more than a few ms.

A request within the caps (`server.requestLimits`) can still be thousands of prompts or inputs: its handler
walks them with `Slices.turn()` between items, which gives the loop back (one `asyncio.sleep(0)`) once the
handler has held it for `SLICE_S`. `/health`, the engine's clock and every other request run in between.
"""

from __future__ import annotations

import asyncio
import time

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
