"""Replay a request log against a scenario on the virtual clock.

The scenario's own workload is dropped; the log's requests arrive instead, each at its logged
arrival (divided by `speed`: 2 replays twice as fast) with its prompt and output tokens, and the
log's model loads start at theirs. The simulation measures what the log measured, from the same
reference point: TTFT and E2E from the engine's arrival, ITL between tokens, load durations, and
each GPU's memory in use at the end. KServe answers' tensor shapes are not simulated here (the
live replay compares them). Everything is deterministic (the scenario's seed, or `seed`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..engine import URGENT, Arrival, Request, Simulation, VirtualClock
from ..errors import RunError
from ..scenario import Scenario
from .records import LoggedLoad, LoggedRequest, RequestLog

NS = 1_000_000_000
MIB = 2**20
DRAIN_STEP_NS = 60 * NS
"""After the last arrival the run goes on in slices of this much simulated time until every request has
ended (a fault repeating forever keeps the event queue from ever emptying)."""
OUTCOME = {"completed": "completed", "failed": "failed", "aborted": "aborted", "": "unfinished"}


class ReplayError(RunError, ValueError):
    """A log that cannot be replayed against a scenario (a model it does not serve)."""


def memory_in_use(sim: Simulation) -> dict[str, float]:
    """Each GPU's memory in use (MiB) as DCGM's FB_USED counts it: the pool's reserve plus what others hold."""
    return {gpu: (pool.memory_reserved() + pool.device.outside) / MIB for gpu, pool in sim.pools.items()}


def default_model(scenario: Scenario) -> str:
    """The model a log row that names none goes to: the workload's first source's, else the first model."""
    if scenario.workload is not None:
        for source in scenario.workload.sources:
            if source.model:
                return source.model
    return scenario.models[0].id


@dataclass
class _Pending:
    """What the run fills in for one logged load."""

    load: LoggedLoad
    started: int = -1
    ended: int = -1
    problem: str = ""


@dataclass
class SimulationReplay:
    """A log's requests and loads scheduled on a fresh simulation of the scenario."""

    scenario: Scenario
    base_dir: Path = Path(".")
    seed: int | None = None
    speed: float = 1.0
    model: str | None = None
    """The model for rows that name none or one the scenario lacks (None: `default_model`)."""
    itl: bool = True
    """Measure every token's time (memory grows with the tokens; off for long traces without ITL)."""
    sim: Simulation = field(init=False)

    def run(self, log: RequestLog) -> RequestLog:
        """Replay `log`; the replayed log has one request per logged one, in the same order."""
        if self.speed <= 0:
            raise ReplayError(f"speed must be positive, not {self.speed}")
        bare = self.scenario.model_copy(update={"workload": None})
        sim = self.sim = Simulation(bare, self.base_dir, seed=self.seed, telemetry=False)
        sim.timeline.per_token = self.itl
        fallback = self.model or default_model(self.scenario)
        if fallback not in sim.models:
            raise ReplayError(f"the scenario serves no model {fallback!r} (it serves {', '.join(sorted(sim.models))})")
        submitted: list[Request | None] = [None] * len(log.requests)
        for index, logged in enumerate(log.requests):
            name = logged.model if logged.model in sim.models and self.model is None else fallback
            arrival = Arrival(self._at(logged.arrival_ns), "replay", name, logged.prompt_tokens, logged.output_tokens,
                              logged.priority, -1, 0, version=logged.version or "")
            sim.kernel.at(arrival.time, self._submitter(sim, arrival, submitted, index), URGENT)
        pending = [self._schedule_load(sim, load) for load in log.loads]
        last = max((self._at(r.arrival_ns) for r in log.requests), default=0)
        self._drain(sim, last, submitted, pending)
        return self._collect(log, sim, submitted, pending)

    def _at(self, arrival_ns: int) -> int:
        return round(arrival_ns / self.speed)

    @staticmethod
    def _submitter(sim: Simulation, arrival: Arrival, out: list[Request | None], index: int) -> Callable[[], None]:
        def submit() -> None:
            out[index] = sim.submit(arrival)
        return submit

    def _schedule_load(self, sim: Simulation, load: LoggedLoad) -> _Pending:
        pending = _Pending(load)
        served = sim.models.get(load.model)
        if served is None:
            pending.problem = f"the scenario serves no model {load.model!r}"
            return pending

        def done(problem: str) -> None:
            pending.ended, pending.problem = sim.kernel.now, problem

        def start() -> None:
            pending.started = sim.kernel.now
            served.request_load(done)

        sim.kernel.at(self._at(load.arrival_ns), start, URGENT)
        return pending

    @staticmethod
    def _drain(sim: Simulation, last: int, submitted: list[Request | None], pending: list[_Pending]) -> None:
        clock = VirtualClock(sim.kernel)
        clock.run(last)
        horizon = last
        while sim.kernel.peek() is not None:
            if all(r is not None and r.done for r in submitted) and all(p.ended >= 0 or p.problem for p in pending):
                break
            horizon += DRAIN_STEP_NS
            clock.run(horizon)

    def _collect(self, log: RequestLog, sim: Simulation, submitted: list[Request | None],
                 pending: list[_Pending]) -> RequestLog:
        tokens: dict[int, list[int]] = {}
        if self.itl:
            for event in sim.timeline.events:
                if event[1] == "token":
                    tokens.setdefault(event[2], []).append(event[0])
        requests = [self._replayed(logged, request, tokens) for logged, request in zip(log.requests, submitted)]
        loads = [LoggedLoad(p.load.arrival_ns, p.load.model, p.load.version,
                            (p.ended - p.started) / NS if p.ended >= 0 else None,
                            "failed" if p.problem else "ok", p.problem) for p in pending]
        meta = {"scenario": self.scenario.metadata.name, "seed": sim.seed, "replay_speed": self.speed,
                "replayed": log.source}
        return RequestLog(requests, loads, memory_in_use(sim), "simulation", meta)

    def _replayed(self, logged: LoggedRequest, request: Request | None, tokens: dict[int, list[int]]) -> LoggedRequest:
        if request is None:
            return LoggedRequest(logged.arrival_ns, logged.model, logged.prompt_tokens, logged.output_tokens,
                                 logged.endpoint, logged.stream, "unfinished")
        times = tokens.get(request.id)
        gaps = [(b - a) / NS for a, b in itertools.pairwise(times)] if times else None
        ended = request.finished_at if request.done else None
        first = request.first_token_at if request.first_token_at >= 0 else None
        return LoggedRequest(
            logged.arrival_ns, request.model, request.prompt, request.output, logged.endpoint, logged.stream,
            OUTCOME[request.outcome], ttft=(first - request.arrival) / NS if first is not None else None,
            itl=gaps if self.itl else None, e2e=(ended - request.arrival) / NS if ended is not None else None,
            version=logged.version, batch=logged.batch, inputs=logged.inputs, error=request.error,
            priority=logged.priority,
        )
