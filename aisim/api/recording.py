"""`aisim serve --record FILE`: the server's request log, in aisim's log format (`aisim.replay.formats`).

What a server log measures, on the wall clock: a request arrives when the handler hands it to the
engine (the instant the simulated engine stamps as its arrival), its tokens when the engine releases
them to the handler, its end when the engine finishes it; `frontend` is the time before, from
Tornado starting to read it (parsing, tokenizing, a network delay). Measuring from the engine's
arrival is what lets a replay on the same scenario reproduce the log: the simulation models the
engine, not the HTTP frontend. TTFT and ITL are written for streamed answers only (a client sees no
token times otherwise). KServe inferences add their tensors' names, datatypes and shapes; model
loads through the repository API their duration; the GPUs' memory is written when the server
stops. The header's `speed` lets a reader convert wall seconds to the server's simulated seconds
(the clock is assumed to run at that one speed throughout).
"""

from __future__ import annotations

import datetime
import itertools
import time
from pathlib import Path
from typing import Any

from .. import __version__
from ..engine import Call, Simulation
from ..replay.formats import load_record, memory_records, request_record
from ..replay.recorder import LogWriter
from ..replay.records import LoggedLoad, LoggedRequest, TensorShape
from ..replay.simulate import memory_in_use

STATUS = {"finished": "completed", "failed": "failed", "aborted": "aborted"}


class Recording:
    """One server's log file, fed by its handlers."""

    def __init__(self, path: str | Path, scenario: str, speed: float, seed: int, origin_wall: float) -> None:
        self.origin = origin_wall
        started = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
        self.writer = LogWriter(path, scenario=scenario, speed=speed, seed=seed, started=started,
                                aisim=__version__, clock="wall")

    def _arrival(self, started_wall: float) -> int:
        return round((started_wall - self.origin) * 1e9)

    def request(self, call: Call, end: str, endpoint: str, elapsed_s: float, started_wall: float | None = None) -> None:
        """A generating request ended (`end`: finished, failed or aborted); `elapsed_s` since Tornado
        started reading it, or `started_wall`, that instant on the monotonic clock (a split server's engine core,
        whose own call's arrival, tokens and end measure the rest: every field on one clock)."""
        now = time.monotonic()
        started = now - elapsed_s if started_wall is None else started_wall
        submitted = call.submitted_wall
        walls = call.token_walls
        streamed = call.live_tokens
        error = call.request.error if call.request is not None and end == "failed" else ""
        logged = LoggedRequest(
            self._arrival(submitted), call.arrival.model, call.arrival.prompt, call.arrival.output, endpoint, streamed,
            STATUS.get(end, end), ttft=walls[0] - submitted if streamed and walls else None,
            itl=[b - a for a, b in itertools.pairwise(walls)] if streamed else None,
            e2e=(call.ended_wall or now) - submitted, error=error, frontend=submitted - started,
            priority=call.arrival.priority,
        )
        self.writer.write(request_record(logged))

    def infer(self, call: Call | None, model: str, version: str, batch: int, inputs: list[Any],
              outputs: list[tuple[Any, list[int], bytes]], elapsed_s: float, error: str = "",
              end: str = "finished", started_wall: float | None = None) -> None:
        """A KServe inference ended (`end`: finished or aborted, failed when `error` is given): its tensors
        as sent and answered (none answered when it failed or was aborted); `call` is None when it failed
        before reaching the engine. `started_wall`: as `request`'s."""
        now = time.monotonic()
        started = now - elapsed_s if started_wall is None else started_wall
        submitted = call.submitted_wall if call is not None else started
        ended = call.ended_wall if call is not None and call.ended_wall is not None else now
        status = "failed" if error else STATUS[end]
        logged = LoggedRequest(
            self._arrival(submitted), model, max(batch, 1), 0, f"/v2/models/{model}/infer", False,
            status, e2e=ended - submitted, version=version, batch=batch,
            inputs=tuple(TensorShape(t.name, t.datatype, tuple(t.shape)) for t in inputs),
            outputs=None if status != "completed" else tuple(TensorShape(t.name, t.datatype, tuple(shape)) for t, shape, _ in outputs),
            error=error, frontend=submitted - started, priority=call.arrival.priority if call is not None else 0,
        )
        self.writer.write(request_record(logged))

    def load(self, model: str, version: str, elapsed_s: float, error: str = "") -> None:
        """A model load through the repository API ended."""
        started = time.monotonic() - elapsed_s
        self.writer.write(load_record(LoggedLoad(self._arrival(started), model, version, elapsed_s,
                                                 "failed" if error else "ok", error)))

    def close(self, sim: Simulation) -> None:
        """The server stops: write each GPU's memory in use (as DCGM's FB_USED counts it), flush, close."""
        self.writer.close(*memory_records(memory_in_use(sim)))
